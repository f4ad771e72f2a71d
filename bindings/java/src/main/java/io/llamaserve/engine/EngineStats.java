package io.llamaserve.engine;

/** A snapshot of the engine's queues, KV cache and counters. */
public record EngineStats(long waiting, long running, long kvBlocksTotal, long kvBlocksFree,
    long requestsFinished, long promptTokensTotal, long generatedTokensTotal,
    long preemptionsTotal, long stepsTotal) {
  static EngineStats of(long[] v) {
    return new EngineStats(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
  }
}
