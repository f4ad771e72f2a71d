"""OpenAI-compatible routes through the official `openai` client: chat and legacy
completions, streaming and not, usage, logprobs, stop strings, seeds, model listing."""

from __future__ import annotations


import httpx
import openai
import pytest

from llamaserve_e2e import MODEL_NAME, json_lines, parse_sse

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


@pytest.fixture
def oai(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_models_list(oai):
    models = oai.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    assert oai.models.retrieve(MODEL_NAME).id == MODEL_NAME


def test_chat_non_stream_has_text_and_usage(oai, client):
    response = oai.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=8,
                                           temperature=0)
    choice = response.choices[0]
    assert response.object == "chat.completion"
    assert response.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant"
    assert choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    usage = response.usage
    assert usage.completion_tokens >= 1 and usage.completion_tokens <= 8
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # The prompt count is the chat template's tokens: the tokenizer endpoint agrees on the text.
    assert usage.prompt_tokens > len(client.post("/tokenize", json={"content": QUESTION[0]["content"]})
                                     .json()["tokens"])
    # Greedy decoding: the same request gives the same text.
    again = oai.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=8, temperature=0)
    assert again.choices[0].message.content == choice.message.content


def test_chat_stream_matches_non_stream(oai):
    reference = oai.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=8,
                                            temperature=0)
    stream = oai.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=8,
                                         temperature=0, stream=True,
                                         stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reference.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [reference.choices[0].finish_reason]
    # include_usage: one last chunk with no choices and the usage.
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == reference.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == reference.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1


def test_raw_stream_ends_with_done(server):
    body = {"messages": QUESTION, "max_tokens": 4, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    events = parse_sse(text)
    assert events[-1] == ("message", "[DONE]")
    assert [data for _, data in events].count("[DONE]") == 1
    chunks = json_lines(events)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert "usage" not in chunks[-1]  # not asked for


def test_completions_prompt_forms(oai, client):
    text = oai.completions.create(model=MODEL_NAME, prompt="1, 2, 3, 4,", max_tokens=6, temperature=0)
    assert text.object == "text_completion"
    assert text.choices[0].text
    assert text.usage.completion_tokens == 6 and text.choices[0].finish_reason == "length"
    ids = client.post("/tokenize", json={"content": "1, 2, 3, 4,", "add_special": True}).json()["tokens"]
    from_ids = oai.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=6, temperature=0)
    assert from_ids.choices[0].text == text.choices[0].text
    assert from_ids.usage.prompt_tokens == text.usage.prompt_tokens == len(ids)


def test_completions_stream_with_usage(oai):
    reference = oai.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=6, temperature=0)
    chunks = list(oai.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=6,
                                         temperature=0, stream=True,
                                         stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == reference.choices[0].text
    assert chunks[-1].usage.total_tokens == reference.usage.total_tokens


def test_stop_string_is_not_emitted(oai):
    free = oai.completions.create(model=MODEL_NAME, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0)
    text = free.choices[0].text
    assert "7" in text, text  # the model counts on; stop at the first "7"
    stopped = oai.completions.create(model=MODEL_NAME, prompt="1, 2, 3, 4,", max_tokens=12,
                                     temperature=0, stop=["7"])
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == text[:text.index("7")]


def test_seed_reproduces_sampling(oai):
    kwargs = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "Name a fruit."}],
                  max_tokens=8, temperature=1.0, top_p=0.95, seed=42)
    first = oai.chat.completions.create(**kwargs).choices[0].message.content
    second = oai.chat.completions.create(**kwargs).choices[0].message.content
    assert first == second


def test_logprobs(oai):
    response = oai.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=4,
                                           temperature=0, logprobs=True, top_logprobs=3)
    content = response.choices[0].logprobs.content
    assert len(content) == response.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert entry.logprob >= max(t.logprob for t in entry.top_logprobs) - 1e-4
    assert "".join(e.token for e in content) == response.choices[0].message.content


def test_user_and_penalties_accepted(oai):
    response = oai.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=4,
                                           temperature=0.7, top_p=0.9, presence_penalty=0.5,
                                           frequency_penalty=0.5, user="user-1",
                                           extra_body={"top_k": 20, "min_p": 0.05,
                                                       "repetition_penalty": 1.1})
    assert response.choices[0].message.content is not None


def test_errors_raise_typed_exceptions(oai):
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="gpt-4", messages=QUESTION, max_tokens=4)
    with pytest.raises(openai.BadRequestError) as error:
        oai.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=4, n=2)
    assert "'n'" in error.value.message


def test_tool_turns_reach_a_template_that_knows_no_tools(oai):
    """SmolLM2's template knows no tools: the server writes the calls of an assistant turn and
    the tool's result into the conversation as text, so a turn whose content is null (which the
    template itself would fail on: its "+" with None) renders, and the result is in the prompt."""
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    messages = QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Paris"}]
    response = oai.chat.completions.create(model=MODEL_NAME, messages=messages, tools=tools,
                                           max_tokens=4, temperature=0)
    assert response.choices[0].finish_reason in ("stop", "length", "tool_calls")
    without_result = oai.chat.completions.create(model=MODEL_NAME, messages=messages[:2],
                                                 tools=tools, max_tokens=1, temperature=0)
    assert response.usage.prompt_tokens > without_result.usage.prompt_tokens
