"""A tiny Hugging Face Llama model directory (random weights) that real vLLM can serve.

It needs torch, transformers and tokenizers, which live in the vLLM venv rather than the
test venv, so it runs as a script with that venv's python:

    VLLM_PYTHON tests/support/tiny_hf_model.py OUTDIR    -> prints OUTDIR on stdout

What it writes: a byte-free BPE tokenizer trained on the spot on the English text below
(ASCII alphabet plus ~400 merges, so any generated token decodes to readable text), wrapped
in `PreTrainedTokenizerFast` with a ChatML chat template and <|im_end|> as end of turn, and a
`LlamaConfig` model (vocab 512, hidden 64, 2 layers, 2 heads, 1 KV head). head_dim is 32:
vLLM's CPU attention starts with head_dim 16 but the first request then kills the server.

The weights are random, with one deliberate structure: the special tokens can never be
sampled. Hidden dimension 0 carries a constant that no layer writes to, so after the final
RMSNorm it is always positive, and the special tokens' output rows weigh it strongly
negative. A reply therefore never ends early by chance (finish_reason is "length"), and a
test asking for 64 tokens gets 64 without vLLM-only flags such as `ignore_eos`.

The result is cached: OUTDIR/.sparkdeck-stamp holds a digest of this file, and a directory
whose stamp matches is reused as it is. A new directory is built beside OUTDIR and renamed
into place, so a run killed half-way (or a second one running at the same time) never leaves
a half-written model where the stamp says it is complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

STAMP = ".sparkdeck-stamp"
SEED = 20260
VOCAB = 512
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Training text for the tokenizer: ordinary English, so the merges are common words and
# word pieces. Written for this file.
CORPUS = """
The panel shows how much memory the engine uses and how much is left for the host.
When memory runs out the machine can stop answering, so the panel checks before it starts
an engine, watches while the model loads, and stops the engine it started when the host is
in danger. A user opens the panel, picks a preset, and sees what it will claim from the
shared pool. Then the old engine is stopped, the page cache is dropped, the image is pulled
and the new container starts. The logs stream in a pane, and the panel says ready when the
health check answers. After that the user can chat with the model, read the number of
tokens per second, the time to the first token, the requests that are running or waiting,
and how full the cache is. Some people run a benchmark, compare two engines on the same
model, switch, and repeat until they find the one they like best.
This is a small model with random weights. It does not know anything, but it answers every
question with words, one token at a time, as fast as the processor can go. It is here so the
tests can talk to a real server over real sockets and read real numbers from it.
Hello, world! How are you today? I am fine, thank you. What would you like to know about
the weather, the time, the road, the house, the garden, the river, the city or the sea?
Please write a short story about a cat and a dog who lived in a little house near the
forest. They were good friends and they played together every day until the sun went down.
One morning the cat found a small key under a stone, and the dog said that it must open
something important. They looked everywhere: in the kitchen, in the old box, behind the door
and under the bed. At last they found a door in the wall of the garden, and it opened.
Numbers: one two three four five six seven eight nine ten, 1 2 3 4 5 6 7 8 9 10 100 2026.
"""


def _stamp_value() -> str:
    """This file's digest: any change to how the model is made makes a new one."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16] + "\n"


def _is_current(out: Path) -> bool:
    try:
        return (out / STAMP).read_text() == _stamp_value()
    except OSError:
        return False


def _train_tokenizer(target: Path) -> None:
    import string

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # Metaspace instead of byte-level: byte-level vocabularies hold lone UTF-8 continuation
    # bytes, which a random model emits and which decode to U+FFFD instead of text.
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    alphabet = [c for c in string.printable if c not in string.whitespace] + ["\u2581"]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<unk>", *SPECIAL],
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHATML
    fast.model_max_length = 1024
    fast.save_pretrained(target)


def _write_model(target: Path) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(target)
    special_ids = sorted(set(tokenizer.all_special_ids))
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # Dimension 0 of the residual stream: a constant 1.0 that no layer writes to ...
        model.model.embed_tokens.weight[:, 0] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        # ... read only by the output rows of the special tokens, strongly negative.
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[special_ids, 0] = -8.0
    model.save_pretrained(target, safe_serialization=True)
    # vLLM reads sampling defaults from generation_config.json; keep them neutral.
    (target / "generation_config.json").write_text(
        json.dumps({"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id})
    )


def ensure_tiny_model(out: Path) -> Path:
    """Write the model to `out` unless a complete copy of this version is already there."""
    if _is_current(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        work.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache from other users
        _train_tokenizer(work)
        _write_model(work)
        (work / STAMP).write_text(_stamp_value())
        for written in work.iterdir():
            written.chmod(0o644)  # save_pretrained leaves the weights 0600
        # Another run may have finished first while this one was writing: a server may
        # already be reading its copy, so keep it. Only a stale version is replaced.
        if not _is_current(out):
            if out.exists():
                old = out.with_name(f".{out.name}.old.{os.getpid()}")
                out.rename(old)
                shutil.rmtree(old, ignore_errors=True)
            work.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: VLLM_PYTHON tests/support/tiny_hf_model.py OUTDIR")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(ensure_tiny_model(Path(sys.argv[1]).resolve()))
