package io.llamaserve.testing;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A real `llamaserve serve` child process with the default model on a free loopback port
 * (--port 0; the port is read from the "listening on" log line). Output goes to a log file
 * (a pipe could fill up and block the server).
 */
public final class ServerProcess implements AutoCloseable {
  private static final Pattern LISTENING = Pattern.compile("listening on http://[^:]+:(\\d+)");
  private static final HttpClient HTTP = HttpClient.newBuilder()
      .version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(5)).build();

  private final Process process;
  private final Path log;
  private final String url;
  private final String apiKey; // null = none

  private ServerProcess(Process process, Path log, String url, String apiKey) {
    this.process = process;
    this.log = log;
    this.url = url;
    this.apiKey = apiKey;
  }

  /** Starts a server with the given extra flags and waits until /ready answers 200. */
  public static ServerProcess start(String name, String... flags) throws IOException,
      InterruptedException {
    return startWithKey(name, null, flags);
  }

  /** The same, for a server that requires {@code apiKey} (null = none). */
  public static ServerProcess startWithKey(String name, String apiKey, String... flags)
      throws IOException, InterruptedException {
    return startServing(name, apiKey, List.of("-m", TestPaths.model().toString()), flags);
  }

  /** A server of several models: {@code modelArgs} such as "--model", "a=PATH", ... */
  public static ServerProcess startModels(String name, List<String> modelArgs, String... flags)
      throws IOException, InterruptedException {
    return startServing(name, null, modelArgs, flags);
  }

  private static ServerProcess startServing(String name, String apiKey, List<String> modelArgs,
      String... flags) throws IOException, InterruptedException {
    List<String> command = new ArrayList<>(List.of(TestPaths.binary().toString(), "serve"));
    command.addAll(modelArgs);
    command.addAll(List.of("--host", "127.0.0.1", "--port", "0"));
    if (apiKey != null) command.addAll(List.of("--api-key", apiKey));
    command.addAll(List.of(flags));
    Path log = TestPaths.logDir().resolve(name + ".log");
    Process process = new ProcessBuilder(command).redirectErrorStream(true)
        .redirectOutput(log.toFile()).start();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
    String url = null;
    try {
      while (url == null) {
        if (!process.isAlive()) {
          throw new IllegalStateException("server exited with " + process.exitValue() + ":\n"
              + Files.readString(log));
        }
        Matcher m = LISTENING.matcher(Files.readString(log));
        if (m.find()) {
          url = "http://127.0.0.1:" + m.group(1);
        } else {
          if (System.nanoTime() > deadline) throw new IllegalStateException("no port in " + log);
          Thread.sleep(20);
        }
      }
      ServerProcess server = new ServerProcess(process, log, url, apiKey);
      server.waitFor(() -> server.status("/ready") == 200, Duration.ofSeconds(120), "ready");
      return server;
    } catch (IOException | InterruptedException | RuntimeException e) {
      process.destroyForcibly();
      throw e;
    }
  }

  public String url() {
    return url;
  }

  /** The HTTP status of GET path, or -1 when there is no answer. */
  public int status(String path) {
    try {
      HttpRequest request = get(path);
      return HTTP.send(request, HttpResponse.BodyHandlers.discarding()).statusCode();
    } catch (IOException e) {
      return -1;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return -1;
    }
  }

  /** A sample of GET /metrics without labels (e.g. llamaserve_running_sequences). */
  public double metric(String name) throws IOException, InterruptedException {
    String text = HTTP.send(get("/metrics"),
        HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8)).body();
    for (String line : text.split("\n")) {
      if (line.startsWith(name + " ")) return Double.parseDouble(line.substring(name.length() + 1));
    }
    throw new IllegalStateException("no metric " + name + " in:\n" + text);
  }

  /** The metric, or NaN when it cannot be read. */
  public double metricOrNaN(String name) {
    try {
      return metric(name);
    } catch (IOException | RuntimeException e) {
      return Double.NaN;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return Double.NaN;
    }
  }

  /** True once nothing runs or waits in the server's engine. */
  public boolean idle() {
    return metricOrNaN("llamaserve_running_sequences") == 0
        && metricOrNaN("llamaserve_queue_length") == 0;
  }

  private HttpRequest get(String path) {
    HttpRequest.Builder builder = HttpRequest.newBuilder(URI.create(url + path))
        .timeout(Duration.ofSeconds(5));
    if (apiKey != null) builder.header("Authorization", "Bearer " + apiKey);
    return builder.build();
  }

  /** Polls {@code condition} until it holds; fails after {@code timeout}. */
  public void waitFor(BooleanSupplier condition, Duration timeout, String what)
      throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (!condition.getAsBoolean()) {
      if (!process.isAlive()) throw new IllegalStateException("server died:\n" + log());
      if (System.nanoTime() > deadline) {
        throw new AssertionError("not " + what + " within " + timeout + "; log:\n" + log());
      }
      Thread.sleep(20);
    }
  }

  public String log() {
    try {
      return Files.readString(log);
    } catch (IOException e) {
      return "(log unreadable: " + e + ")";
    }
  }

  @Override
  public void close() throws InterruptedException {
    process.destroy(); // SIGTERM: the server drains and exits
    if (!process.waitFor(30, TimeUnit.SECONDS)) {
      process.destroyForcibly();
      process.waitFor();
    }
  }
}
