package io.llamaserve.client;

import java.util.List;

/**
 * The answer of POST /v1/embeddings: one L2-normalized vector per input, in input order, and
 * the prompt tokens they took ({@code usage.completionTokens()} is 0).
 */
public record EmbeddingResult(String model, List<float[]> embeddings, Usage usage) {
  public EmbeddingResult {
    embeddings = List.copyOf(embeddings);
  }

  /** The length of each vector (the model's hidden size). */
  public int dimensions() {
    return embeddings.isEmpty() ? 0 : embeddings.get(0).length;
  }
}
