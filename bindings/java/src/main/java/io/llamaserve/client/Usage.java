package io.llamaserve.client;

/** Token counts of one request, as the server reports them. */
public record Usage(long promptTokens, long completionTokens, long totalTokens) {}
