package io.llamaserve.client;

/**
 * One model of GET /v1/models: its id (what requests send as {@code model}), its state
 * ({@code loaded}, {@code loading}, {@code unloaded} or {@code failed}), its context length
 * in tokens (0 when the server does not know it yet), for a failed model or a failed reload
 * the error (else null), and for an alias ({@code --model-alias}) the id of the model it
 * names (else null).
 */
public record ModelInfo(String id, String state, long contextLength, String error,
    String aliasOf) {
  /** A model that is not an alias. */
  public ModelInfo(String id, String state, long contextLength, String error) {
    this(id, state, contextLength, error, null);
  }

  /** The model answers requests now, without loading first. */
  public boolean loaded() {
    return "loaded".equals(state);
  }

  /** This entry is another id of a served model (answers carry that model's id). */
  public boolean isAlias() {
    return aliasOf != null;
  }
}
