package io.llamaserve.client;

import io.llamaserve.ToolCall;
import java.util.concurrent.Flow;

/** Feeds a StreamListener from a streamed call, with unbounded demand. */
final class ListenerSubscriber implements Flow.Subscriber<String> {
  private final StreamListener listener;
  private StreamingCall call;

  ListenerSubscriber(StreamListener listener) {
    this.listener = listener;
  }

  void attach(StreamingCall call) {
    this.call = call;
  }

  @Override
  public void onSubscribe(Flow.Subscription subscription) {
    subscription.request(Long.MAX_VALUE);
  }

  /** A completed tool call, from the same drain loop as onNext. */
  void onToolCall(ToolCall call) {
    listener.onToolCall(call); // an exception fails the call, as from onText
  }

  @Override
  public void onNext(String text) {
    listener.onText(text); // an exception fails the call (StreamingCall catches it)
  }

  @Override
  public void onError(Throwable error) {
    listener.onError(error);
  }

  @Override
  public void onComplete() {
    listener.onComplete(call.result().join());
  }
}
