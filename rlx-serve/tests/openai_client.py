"""The `openai` package against a running rlx-serve: chat, streaming, completions,
sampling settings, log-probabilities, embeddings, errors and concurrent requests.

Usage: python3 openai_client.py BASE_URL MODEL_NAME
"""

import math
import sys
import threading

import openai

base_url, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
question = [{"role": "user", "content": "What is the capital of France?"}]

# Models.
ids = [m.id for m in client.models.list().data]
assert model in ids and "all-MiniLM-L6-v2" in ids, ids

# Chat, greedy: the known answer, ended by the end-of-turn token.
chat = client.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=40)
answer = chat.choices[0].message.content
assert "Paris" in answer, answer
assert chat.choices[0].finish_reason == "stop", chat
assert chat.usage.completion_tokens > 0 and chat.usage.prompt_tokens > 10, chat.usage
assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens

# Streamed, the same text piece by piece, then the usage.
pieces, finish, usage = [], None, None
stream = client.chat.completions.create(
    model=model, messages=question, temperature=0, max_tokens=40, stream=True,
    stream_options={"include_usage": True},
)
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage
    for choice in chunk.choices:
        if choice.delta.content:
            pieces.append(choice.delta.content)
        finish = choice.finish_reason or finish
assert "".join(pieces) == answer, (pieces, answer)
assert len(pieces) > 2 and finish == "stop", (pieces, finish)
assert usage is not None and usage.completion_tokens == chat.usage.completion_tokens, usage

# Budget, stop strings, seeds and choices.
short = client.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=3)
assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 3, short
stopped = client.chat.completions.create(
    model=model, messages=question, temperature=0, max_tokens=40, stop=["Paris"]
)
assert stopped.choices[0].finish_reason == "stop", stopped
assert answer.startswith(stopped.choices[0].message.content), (stopped, answer)
assert "Paris" not in stopped.choices[0].message.content
story = [{"role": "user", "content": "Tell me a story about a cat."}]
sampled = [
    client.chat.completions.create(
        model=model, messages=story, temperature=0.9, top_p=0.95, seed=7, max_tokens=24, n=2,
        presence_penalty=0.5, frequency_penalty=0.2,
    )
    for _ in range(2)
]
texts = [[c.message.content for c in s.choices] for s in sampled]
assert texts[0] == texts[1], texts
assert len(texts[0]) == 2 and texts[0][0] != texts[0][1], texts

# Log-probabilities: one entry per token, the chosen one among the likeliest when greedy.
lp = client.chat.completions.create(
    model=model, messages=question, temperature=0, max_tokens=5, logprobs=True, top_logprobs=3
)
content = lp.choices[0].logprobs.content
assert len(content) == lp.usage.completion_tokens == 5, content
for entry in content:
    assert entry.logprob <= 0 and len(entry.top_logprobs) == 3, entry
    assert math.isclose(entry.top_logprobs[0].logprob, entry.logprob, abs_tol=1e-6), entry

# Legacy completions, whole and streamed.
done = client.completions.create(model=model, prompt="The three primary colors are", max_tokens=12, temperature=0)
assert done.choices[0].finish_reason == "length" and len(done.choices[0].text) > 10, done
streamed = "".join(
    c.choices[0].text
    for c in client.completions.create(
        model=model, prompt="The three primary colors are", max_tokens=12, temperature=0, stream=True
    )
    if c.choices
)
assert streamed == done.choices[0].text, (streamed, done.choices[0].text)

# Concurrent requests join one batch; greedy answers stay those of one at a time.
results = [None] * 6
def ask(i):
    r = client.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=40)
    results[i] = r.choices[0].message.content
threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert results == [answer] * 6, results

# Embeddings (the client asks for base64 and decodes it unless told a format).
sentences = ["A man is eating food.", "A man is eating pasta.", "The sky is blue today."]
for fmt in [openai.NOT_GIVEN, "float"]:
    emb = client.embeddings.create(model="all-MiniLM-L6-v2", input=sentences, encoding_format=fmt)
    vectors = [d.embedding for d in emb.data]
    assert len(vectors) == 3 and all(len(v) == 384 for v in vectors), fmt
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))
    norms = [math.sqrt(dot(v, v)) for v in vectors]
    cos = lambda a, b: dot(vectors[a], vectors[b]) / (norms[a] * norms[b])
    assert cos(0, 1) > cos(0, 2) + 0.2, (cos(0, 1), cos(0, 2))
    assert emb.usage.prompt_tokens > 6, emb.usage

# Errors come back as the client's typed exceptions.
def raises(kind, **kwargs):
    try:
        client.chat.completions.create(**{"model": model, "messages": question, **kwargs})
    except kind as e:
        assert e.body is not None and "message" in e.body, e.body
        return
    raise AssertionError(f"{kwargs} did not raise {kind.__name__}")
raises(openai.NotFoundError, model="no-such-model")
raises(openai.BadRequestError, temperature=5)
raises(openai.BadRequestError, max_tokens=10**9)
raises(openai.BadRequestError, n=0)
raises(openai.BadRequestError, messages=[{"role": "wizard", "content": "hi"}])
print("openai client: all checks passed")
