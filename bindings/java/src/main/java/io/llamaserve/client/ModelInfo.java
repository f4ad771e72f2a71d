package io.llamaserve.client;

/**
 * One model of GET /v1/models: its id (what requests send as {@code model}), its state
 * ({@code loaded}, {@code loading}, {@code unloaded} or {@code failed}), its context length
 * in tokens (0 when the server does not know it yet) and, for a failed model or a failed
 * reload, the error (else null).
 */
public record ModelInfo(String id, String state, long contextLength, String error) {
  /** The model answers requests now, without loading first. */
  public boolean loaded() {
    return "loaded".equals(state);
  }
}
