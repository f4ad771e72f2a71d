package io.llamaserve.client;

import java.util.Spliterator;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CancellationException;
import java.util.concurrent.Flow;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.function.Consumer;

/**
 * Adapts a streamed generation to a blocking {@code Stream<String>}: a Flow.Subscriber that
 * queues a bounded window of text pieces, and a Spliterator that takes them on the
 * consumer's thread. Closing the Stream cancels the call (and so the generation).
 */
final class BlockingTextStream implements Flow.Subscriber<String>, Spliterator<String> {
  private static final int WINDOW = 32; // pieces requested ahead of the consumer
  private static final Object END = new Object();

  private final BlockingQueue<Object> queue = new LinkedBlockingQueue<>();
  private volatile Flow.Subscription subscription;
  private int consumedSinceRequest;
  private boolean finished;

  private static final class Failure {
    final Throwable error;

    Failure(Throwable error) {
      this.error = error;
    }
  }

  void cancel() {
    Flow.Subscription s = subscription;
    if (s != null) s.cancel();
    queue.offer(END); // wakes a consumer waiting in tryAdvance
  }

  // Flow.Subscriber (HttpClient threads)

  @Override
  public void onSubscribe(Flow.Subscription s) {
    subscription = s;
    s.request(WINDOW);
  }

  @Override
  public void onNext(String text) {
    queue.offer(text);
  }

  @Override
  public void onError(Throwable error) {
    queue.offer(new Failure(error));
  }

  @Override
  public void onComplete() {
    queue.offer(END);
  }

  // Spliterator (the consumer's thread)

  @Override
  public boolean tryAdvance(Consumer<? super String> action) {
    if (finished) return false;
    Object item;
    try {
      item = queue.take();
    } catch (InterruptedException e) {
      finished = true;
      cancel();
      Thread.currentThread().interrupt();
      throw new CancellationException("interrupted while waiting for the stream");
    }
    if (item == END) {
      finished = true;
      return false;
    }
    if (item instanceof Failure) {
      finished = true;
      Throwable error = ((Failure) item).error;
      if (error instanceof RuntimeException) throw (RuntimeException) error;
      if (error instanceof Error) throw (Error) error;
      throw new LlamaClientException("stream failed: " + error, error);
    }
    action.accept((String) item);
    if (++consumedSinceRequest == WINDOW / 2) {
      consumedSinceRequest = 0;
      subscription.request(WINDOW / 2);
    }
    return true;
  }

  @Override
  public Spliterator<String> trySplit() {
    return null;
  }

  @Override
  public long estimateSize() {
    return Long.MAX_VALUE;
  }

  @Override
  public int characteristics() {
    return ORDERED | NONNULL;
  }
}
