"""Benchmark prompts that come to N tokens as the server itself counts them.

A prompt is filler words in a user message. Each request gets its own order of the same
words, so that no two requests share a prefix the engine could serve from its prefix cache
(vLLM caches by default) while the token count stays the same: whitespace-split tokenizers
count a permutation of the same words the same way. The count is fitted against the
server's own tokenizer endpoint where the engine has one, else against the `usage` of a
one-token request; the runner still checks every request's usage.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from sparkdeck.engines import EngineKind

Messages = list[dict[str, str]]
Counter = Callable[[Messages], "int | None"]

INSTRUCTION = "Continue this list of words with more words, one after another, without end."
# Common English words: most tokenizers hold each as one token after a space, so a word
# costs about one token and the fit converges in a few steps.
_WORDS = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy music market sense nation plan college interest death "
    "experience effect class control care field development role effort rate heart drug show "
    "leader light voice wife police mind price report decision son view relationship town "
    "road"
).split()


class PromptError(Exception):
    """The server's token count could not be brought to the requested size."""


def filler(count: int, seed: int) -> str:
    """`count` words: always the same multiset for a count, in an order set by `seed`."""
    words = [_WORDS[i % len(_WORDS)] for i in range(count)]
    random.Random(seed).shuffle(words)
    return " ".join(words)


# Units that cost one token each in most tokenizers; whole words cost 1-5 (a tiny test
# vocabulary spells them out), so the last few tokens of a prompt are padded with these.
PAD_UNITS = (" a", ".", "\n")


def chat_messages(
    context_words: int, body_words: int, context_seed: int, body_seed: int, pad: str = ""
) -> Messages:
    parts = [filler(context_words, context_seed)] if context_words else []
    parts += [filler(body_words, body_seed) + pad] if body_words or pad else []
    return [{"role": "user", "content": "\n\n".join([*parts, INSTRUCTION])}]


@dataclass(frozen=True)
class PromptPlan:
    """How many filler words make the context (depth) and the prompt, and what they count."""

    context_words: int
    body_words: int
    context_tokens: int  # tokens of the context alone, chat template included
    total_tokens: int  # depth + prompt as the counter counted them
    counted_by: str  # "tokenize", "usage" or "estimate"
    pad: str = ""  # one-token units after the words, to land on the exact count

    def messages(self, request_seed: int, context_seed: int) -> Messages:
        return chat_messages(
            self.context_words, self.body_words, context_seed, request_seed, self.pad
        )


def fit_words(count: Callable[[int], int], target: int, max_calls: int = 12) -> tuple[int, int]:
    """The word count whose token count is closest to `target` (ties: the smaller one).

    `count(k)` must grow with k. Secant steps close in, then single-word steps settle it.
    """
    base = count(0)
    if base >= target:
        return 0, base
    tried: dict[int, int] = {0: base}
    k = target - base
    for _ in range(max_calls):
        if k not in tried:
            tried[k] = count(k)
        got = tried[k]
        if got == target:
            break
        per_word = max((got - base) / k, 1e-3) if k else 1.0
        step = round((target - got) / per_word) or (1 if got < target else -1)
        nxt = max(0, k + step)
        if nxt in tried and (nxt + (1 if got < target else -1)) in tried:
            break  # the words on either side are measured: no closer count exists
        k = nxt if nxt not in tried else k + (1 if got < target else -1)
    best = min(tried, key=lambda w: (abs(tried[w] - target), w))
    return best, tried[best]


def make_counter(
    kind: EngineKind, http: httpx.Client, base_url: str, model: str
) -> tuple[Counter, str]:
    """The best way this server offers to count a chat prompt's tokens, and its name."""
    probe = chat_messages(0, 8, 0, 0)
    try:
        if kind.count_chat_tokens(http, base_url, model, probe) is not None:
            return (lambda m: kind.count_chat_tokens(http, base_url, model, m)), "tokenize"
    except (httpx.HTTPError, ValueError):
        pass

    def by_usage(messages: Messages) -> int | None:
        body = {"model": model, "messages": messages, "max_tokens": 1, "stream": False}
        response = http.post(base_url + "/v1/chat/completions", json=body)
        if response.status_code != 200:
            return None
        usage = response.json().get("usage") or {}
        value = usage.get("prompt_tokens")
        return int(value) if isinstance(value, int) else None

    try:
        if by_usage(probe) is not None:
            return by_usage, "usage"
    except (httpx.HTTPError, ValueError):
        pass
    # Nothing counts tokens: about one token per filler word plus the instruction. Results
    # then carry "estimate" as the prompt-token source.
    return (lambda m: len(m[0]["content"].split()) + 8), "estimate"


def plan_prompt(
    counter: Counter, counted_by: str, prompt_tokens: int, depth_tokens: int = 0
) -> PromptPlan:
    """Fit the context to `depth_tokens` and the whole prompt to depth + `prompt_tokens`."""

    def exact(messages: Messages) -> int:
        value = counter(messages)
        if value is None:
            raise PromptError(
                "the server stopped answering token counts while the prompt was being sized"
            )
        return value

    context_words, context_tokens = 0, 0
    if depth_tokens:
        context_words, context_tokens = fit_words(
            lambda k: exact(chat_messages(k, 0, 0, 0)), depth_tokens
        )
    target = depth_tokens + prompt_tokens
    body_words, total = fit_words(lambda k: exact(chat_messages(context_words, k, 0, 0)), target)
    if total > target and body_words:
        body_words -= 1  # pad up from below: padding cannot take tokens away
        total = exact(chat_messages(context_words, body_words, 0, 0))
    pad = ""
    for unit in PAD_UNITS if total != target else ():

        def padded_by(k: int, unit: str = unit) -> int:
            return exact(chat_messages(context_words, body_words, 0, 0, unit * k))

        units, padded = fit_words(padded_by, target)
        if abs(padded - target) < abs(total - target):
            pad, total = unit * units, padded
        if total == target:
            break
    return PromptPlan(context_words, body_words, context_tokens, total, counted_by, pad)
