package io.llamaserve.client;

/**
 * One Server-Sent Event: the "event" field ("" when absent) and the data lines joined with
 * "\n".
 */
record SseEvent(String event, String data) {}
