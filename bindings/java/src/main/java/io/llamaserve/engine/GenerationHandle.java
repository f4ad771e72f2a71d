package io.llamaserve.engine;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * A submitted generation: read its text with {@link #next()}, stop it with {@link
 * #cancel()}, and {@link #close()} it (try-with-resources). Its native state is freed when
 * the generation ends or at close(), whichever comes first.
 *
 * <p>One thread reads (next/await); cancel() and close() may come from any thread. Native
 * calls hold the read lock and release() the write lock, so the native handle is never
 * freed while in use.
 */
public final class GenerationHandle implements AutoCloseable {
  private static final long POLL_MS = 100; // how often a waiting next() checks for interrupts

  private final LlamaEngine engine;
  private final String id;
  private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
  private long pointer; // 0 once released; guarded by lock
  private final AtomicBoolean closed = new AtomicBoolean();
  private volatile boolean closedByEngine;

  // The reading thread's state, guarded by `reading`.
  private final Object reading = new Object();
  private final Utf8DeltaDecoder decoder = new Utf8DeltaDecoder();
  private final StringBuilder text = new StringBuilder();
  private volatile boolean finished;
  private Generation result;
  private LlamaEngineException failure;

  GenerationHandle(LlamaEngine engine, String id, long pointer) {
    this.engine = engine;
    this.id = id;
    this.pointer = pointer;
  }

  public String id() {
    return id;
  }

  /**
   * Blocks until the next piece of text and returns it (never empty); null once the
   * generation has ended (see {@link #result()}). If the thread is interrupted, the
   * generation is cancelled and next() returns null with the interrupt flag set again.
   *
   * @throws IllegalStateException if the handle was closed by its owner
   */
  public String next() {
    synchronized (reading) {
      boolean interrupted = false;
      try {
        while (!finished) {
          NativeEvent event = poll();
          if (event == null) {
            if (Thread.interrupted()) {
              interrupted = true;
              cancel();
            }
            continue;
          }
          if (event.isDelta()) {
            String piece = decoder.decode(event.text);
            if (piece.isEmpty()) continue;
            text.append(piece);
            return piece;
          }
          String tail = onFinish(event);
          if (!tail.isEmpty()) return tail;
        }
        return null;
      } finally {
        if (interrupted) Thread.currentThread().interrupt();
      }
    }
  }

  /** Reads to the end and returns {@link #result()}. */
  public Generation await() {
    while (next() != null) {
      // the text is collected in next()
    }
    return result();
  }

  /**
   * The outcome, once next() has returned null: the Generation (STOP, LENGTH, CANCELLED).
   *
   * @throws LlamaEngineException if the generation failed or timed out (DEADLINE_EXCEEDED)
   * @throws IllegalStateException if it has not ended yet
   */
  public Generation result() {
    synchronized (reading) {
      if (!finished) throw new IllegalStateException("the generation has not ended yet");
      if (failure != null) throw failure;
      return result;
    }
  }

  public boolean isFinished() {
    return finished;
  }

  /** Asks the engine to stop at its next step; next() then ends with CANCELLED. */
  public void cancel() {
    lock.readLock().lock();
    try {
      if (pointer != 0 && !finished) NativeBridge.cancel(pointer);
    } finally {
      lock.readLock().unlock();
    }
  }

  /** Cancels the generation if it is still running and frees it. Idempotent. */
  @Override
  public void close() {
    release(false);
  }

  /** close() on behalf of LlamaEngine.close(): readers then see CANCELLED, not an error. */
  void closeForEngine() {
    closedByEngine = true;
    release(true);
  }

  private void release(boolean byEngine) {
    if (!closed.compareAndSet(false, true)) return;
    cancel(); // a reader waiting in native next() gets its finish event within one step
    freeNative();
    if (!byEngine) engine.forget(this);
  }

  // Waits (write lock) until no native call uses the pointer, then frees it.
  private void freeNative() {
    lock.writeLock().lock();
    try {
      if (pointer != 0) NativeBridge.release(pointer);
      pointer = 0;
    } finally {
      lock.writeLock().unlock();
    }
  }

  private NativeEvent poll() {
    lock.readLock().lock();
    try {
      if (pointer == 0) {
        if (closedByEngine) return cancelledByClose();
        throw new IllegalStateException("the generation handle is closed");
      }
      return NativeBridge.next(pointer, POLL_MS);
    } finally {
      lock.readLock().unlock();
    }
  }

  // The engine was closed before this generation finished: it ends as cancelled.
  private NativeEvent cancelledByClose() {
    return new NativeEvent(new byte[0], 0, 3, 0, new byte[0], 0, 0, 0, 0, 0, 0);
  }

  /** Records the finish event; returns the decoder's last text (usually ""). */
  private String onFinish(NativeEvent event) {
    String tail = decoder.finish();
    text.append(tail);
    FinishReason reason = FinishReason.of(event.finishReason);
    if (reason == FinishReason.ERROR || reason == FinishReason.TIMEOUT) {
      LlamaEngineException.Code code = reason == FinishReason.TIMEOUT
          ? LlamaEngineException.Code.DEADLINE_EXCEEDED
          : LlamaEngineException.Code.of(event.errorCode);
      failure = new LlamaEngineException(code, "generation " + id + " failed: "
          + new String(event.errorMessage, StandardCharsets.UTF_8));
    }
    result = new Generation(text.toString(), reason, event.promptTokens, event.completionTokens,
        event.queueMs, event.ttftMs, event.totalMs, event.decodeTokensPerSecond);
    finished = true;
    // Nothing more can come: free the native side now rather than at close().
    freeNative();
    engine.forget(this);
    return tail;
  }
}
