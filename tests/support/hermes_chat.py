"""A hermes-style chat template and a character-level tokenizer for the tool-layout tests
(nothing downloaded).

The template has the shape of Qwen2.5's: the tools in the system turn (a line per tool: its
name and its parameters' JSON schema, shorter than Qwen's whole schema), each call
of an assistant turn as `<tool_call>{"name": ..., "arguments": ...}</tool_call>` (arguments
through `tojson`), and consecutive tool messages in one user turn, each in `<tool_response>`.
Turns are `<|role|>...<|end|>` as in `skyhub.trainer.tiny`. (transformers renders templates
with `trim_blocks`: a newline right after a block tag is dropped, hence `{{ '\\n' }}`.)

The tokenizer has one token per printable character and no merges, plus added tokens the
tests choose (a call's skeleton, words): every text has exactly one tokenization, so even a
random model's samples are the tokenizer's own encoding of their text, and an episode's stream
can equal the encoding of the template's rendering token for token.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

SPECIALS = ("<|pad|>", "<|unk|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>",
            "<|end|>")

HERMES_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{%- set system = messages[0].content %}"
    "{%- set rest = messages[1:] %}{%- else %}{%- set system = '' %}"
    "{%- set rest = messages %}{%- endif %}"
    "{%- if tools %}<|system|>{{ system }}\nTools:"
    "{%- for t in tools %}{{ '\\n' }}{{ t.function.name }}: "
    "{{ t.function.parameters.properties | tojson }}{%- endfor %}<|end|>"
    "{%- elif system %}<|system|>{{ system }}<|end|>{%- endif %}"
    "{%- for m in rest %}"
    "{%- if m.role == 'assistant' %}<|assistant|>{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}</tool_call>{%- endfor %}<|end|>"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.first or rest[loop.index0 - 1].role != 'tool' %}<|user|>{%- endif %}"
    "<tool_response>{{ m.content }}</tool_response>"
    "{%- if loop.last or rest[loop.index0 + 1].role != 'tool' %}<|end|>{%- endif %}"
    "{%- else %}<|{{ m.role }}|>{{ m.content }}<|end|>{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{%- endif %}"
)


def char_tokenizer(added: Sequence[str] = (), alphabet: str | None = None) -> Any:
    """One token per character of `alphabet` (printable ASCII by default), the specials, and
    `added` as single (non-special: decoded into the text) tokens; the hermes template."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    chars = alphabet if alphabet is not None else string.printable
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for ch in dict.fromkeys(chars):
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<|unk|>"))
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>",
                                   unk_token="<|unk|>", eos_token="<|end|>", bos_token=None,
                                   additional_special_tokens=list(SPECIALS[2:6]))
    fast.add_tokens(list(added))
    fast.chat_template = HERMES_TEMPLATE
    return fast
