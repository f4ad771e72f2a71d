package io.llamaserve.testing;

import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The real artifacts the integration tests use, from system properties that the pom sets
 * (override with -D): the server binary, the default model and the JNI library. A missing one
 * skips the test, or fails it when llamaserve.requireNative=true (as scripts/test.sh sets).
 */
public final class TestPaths {
  private TestPaths() {}

  public static Path binary() {
    return required("llamaserve.bin", "build/cpu/src/cli/llamaserve");
  }

  public static Path model() {
    return required("llamaserve.model", "models/SmolLM2-135M-Instruct.Q4_1.gguf");
  }

  public static Path jniLibrary() {
    return required("llamaserve.jni.path", "build/cpu/bindings/java/libllamaserve_jni.so");
  }

  public static Path logDir() {
    Path dir = Path.of(System.getProperty("llamaserve.logDir",
        System.getProperty("java.io.tmpdir")));
    try {
      Files.createDirectories(dir);
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
    return dir;
  }

  private static Path required(String property, String fallback) {
    Path path = Path.of(System.getProperty(property, fallback)).toAbsolutePath().normalize();
    boolean present = Files.isRegularFile(path);
    if (!present && Boolean.getBoolean("llamaserve.requireNative")) {
      fail(property + " = " + path + " does not exist (build it, or pass -D" + property + "=...)");
    }
    assumeTrue(present, property + " = " + path + " does not exist; skipping");
    return path;
  }
}
