package io.llamaserve.engine;

/** Why a generation ended. */
public enum FinishReason {
  /** An end-of-generation token or a stop string. */
  STOP,
  /** maxTokens were generated. */
  LENGTH,
  /** Cancelled by the caller, or the engine was closed. */
  CANCELLED,
  /** The engine failed the request (the error is thrown). */
  ERROR,
  /** The request's timeout passed (thrown as DEADLINE_EXCEEDED). */
  TIMEOUT;

  // The numbers of src/engine/request.h (0 is a delta, not a finish).
  static FinishReason of(int number) {
    switch (number) {
      case 1: return STOP;
      case 2: return LENGTH;
      case 3: return CANCELLED;
      case 5: return TIMEOUT;
      default: return ERROR;
    }
  }
}
