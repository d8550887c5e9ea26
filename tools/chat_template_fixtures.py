#!/usr/bin/env python3
"""Chat-template fixtures and the tiny tokenizers of the examples, written with Hugging Face
`transformers` (apply_chat_template on the real Jinja templates), so that the C++ renderer in
src/data/chat_template.cpp can be checked string for string and id for id without Python in CI.

    python3 -m venv /tmp/chat && /tmp/chat/bin/pip install -r tools/requirements-chat.txt
    /tmp/chat/bin/python tools/chat_template_fixtures.py [--shared ../shared/tokenizers] [--only gemma3]

Writes (all small; the 11 MB Qwen3 tokenizer.json is read from the shared folder, never copied):

  examples/tiny-chat/train.jsonl         arithmetic conversations for the end-to-end example
  examples/tiny-chat/tokenizer.json      a byte-level BPE trained on the example data, with
                                         Qwen3's pre-tokenizer, normalizer and added tokens
  examples/tiny-chat/tokenizer_config.json   ... and Qwen3's real chat template
  tests/fixtures/chat/llama3/tokenizer.json  a byte-level BPE with Llama 3's regex and its
                                         special tokens (Meta's files are gated; this stands in)
  tests/fixtures/chat/<name>/tokenizer_config.json   one per template:
      qwen3     the real Qwen3 template, copied from shared/tokenizers/qwen3
      qwen2_5   Qwen2.5-Instruct's template (default system prompt, tool responses)
      chatml    the plain ChatML template many fine-tunes ship
      llama3_1  Llama-3.1-Instruct's template (system header with the knowledge/today dates)
      llama3_0  Llama-3-Instruct's original template
      gemma3    Gemma 3 instruction-tuned models' template, with tests/fixtures/tokenizer/tiny_gemma.json
                (a SentencePiece-style BPE with Gemma's special tokens; tools/tokenizer_fixtures.py)
  tests/fixtures/chat/cases.jsonl        one line per (template, conversation, options):
      {"config": NAME, "tokenizer": "shared:qwen3" | "fixture:llama3" | "example:tiny-chat" | "fixture:gemma",
       "case": ..., "messages": [...], "add_generation_prompt": bool,
       "enable_thinking": bool (only when passed), "text": ..., "ids": [...],
       "assistant_masks": [...]}
      or, where the template raises (Gemma's alternation check), the same without text/ids/masks
      and with "error": the exception's message
  tests/fixtures/chat/VERSIONS.json

`assistant_masks` come from transformers' return_assistant_tokens_mask with a copy of each
template in which {% generation %} ... {% endgeneration %} wraps what streambp trains on: the
assistant's turn after its header, through the end-of-turn token (<|im_end|> / <|eot_id|>), but
not the newline ChatML puts after <|im_end|>. The tool checks that the tagged copy renders the very
same text as the original, so the masks describe the original template's output.
"""
import argparse
import json
import os
import random

import jinja2
import tokenizers
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "chat")
TINY_CHAT = os.path.join(ROOT, "examples", "tiny-chat")

QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# ---------------------------------------------------------------------------------------------
# Templates written here (the Qwen3 one is read from the shared tokenizer_config.json).

QWEN2_5_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

CHATML_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
                   " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
                   "{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Meta-Llama-3.1-8B-Instruct's template (also Llama 3.3; 3.2 differs only in taking today's date
# from strftime_now, which training must not do).
LLAMA3_1_TEMPLATE = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# Meta-Llama-3-8B-Instruct's original template.
LLAMA3_0_TEMPLATE = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                     "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim"
                     " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
                     "{{ content }}{% endfor %}{% if add_generation_prompt %}"
                     "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

# Gemma 3 instruction-tuned models' template (google/gemma-3-*-it tokenizer_config.json): <bos>,
# the system message folded into the first user turn, user/assistant strictly alternating,
# "assistant" written as "model", contents trimmed, images as <start_of_image>.
GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""


def replace_once(text, old, new):
    assert text.count(old) == 1, f"expected exactly one occurrence of {old!r}"
    return text.replace(old, new)


def tag_qwen3(t):
    """Wraps the assistant turn after its header, through <|im_end|>, in {% generation %} (two
    adjacent blocks: Jinja blocks cannot straddle the template's if/else branches)."""
    t = replace_once(
        t,
        "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}",
        "{{- '<|im_start|>' + message.role + '\\n' }}{%- generation %}{{- '<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}{%- endgeneration %}")
    old = "{{- '<|im_start|>' + message.role + '\\n' + content }}"
    assert t.count(old) == 2
    t = t.replace(old, "{{- '<|im_start|>' + message.role + '\\n' }}{%- generation %}{{- content }}{%- endgeneration %}")
    t = replace_once(t, "{{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}",
                     "{%- generation %}{{- '<|im_end|>' }}{%- endgeneration %}{{- '\\n' }}\n    {%- elif message.role == \"tool\" %}")
    return t


def tag_chatml_line(t, line):
    """Splits ChatML's one-line `<|im_start|>role\\ncontent<|im_end|>\\n` for assistant messages."""
    body = line[line.index("{{") + 2:line.rindex("}}")].strip().lstrip("-").strip()
    assert body.startswith("'<|im_start|>' + message") and body.endswith("+ '<|im_end|>' + '\\n'")
    dash = "-" if line.lstrip().startswith("{{-") else ""
    content = "message['content']" if "message['content']" in body else "message.content"
    tagged = ("{%" + dash + " if message['role'] == 'assistant' %}{{" + dash +
              " '<|im_start|>assistant\\n' }}{%" + dash + " generation %}{{" + dash + " " + content +
              " + '<|im_end|>' }}{%" + dash + " endgeneration %}{{" + dash + " '\\n' }}{%" + dash +
              " else %}" + line.strip() + "{%" + dash + " endif %}")
    return replace_once(t, line.strip(), tagged)


def tag_qwen2_5(t):
    return tag_chatml_line(
        t, "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}")


def tag_chatml(t):
    return tag_chatml_line(
        t, "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}")


def tag_llama3_1(t):
    return replace_once(
        t,
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}",
        "{%- if message['role'] == 'assistant' %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
        "{%- generation %}{{- message['content'] | trim + '<|eot_id|>' }}{%- endgeneration %}{%- else %}"
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}"
        "{%- endif %}")


def tag_llama3_0(t):
    return replace_once(
        t,
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim"
        " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}",
        "{% if loop.index0 == 0 %}{{ bos_token }}{% endif %}{% if message['role'] == 'assistant' %}"
        "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% generation %}"
        "{{ message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}{% else %}"
        "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}"
        "{% endif %}")


def tag_gemma3(t):
    """A model turn's trimmed content and its <end_of_turn> (not the newline after it)."""
    t = replace_once(
        t, "{{ message['content'] | trim }}",
        "{%- if role == 'model' -%}{%- generation -%}{{ message['content'] | trim }}{%- endgeneration -%}"
        "{%- else -%}{{ message['content'] | trim }}{%- endif -%}")
    return replace_once(
        t, "{{ '<end_of_turn>\\n' }}",
        "{%- if role == 'model' -%}{%- generation -%}{{ '<end_of_turn>' }}{%- endgeneration -%}"
        "{%- else -%}{{ '<end_of_turn>' }}{%- endif -%}{{ '\\n' }}")


# ---------------------------------------------------------------------------------------------
# Conversations.

def tiny_chat_records():
    """Arithmetic conversations a tiny model learns the shape of in a few dozen steps."""
    rng = random.Random(5)
    records = []
    systems = ["You are a calculator. Answer in one sentence.", "Be brief."]
    for i in range(96):
        a, b = rng.randint(0, 49), rng.randint(0, 49)
        op, word, val = rng.choice([("+", "plus", a + b), ("-", "minus", a - b), ("*", "times", a * b)])
        msgs = []
        if i % 4 == 0:
            msgs.append({"role": "system", "content": systems[i % 8 // 4]})
        msgs.append({"role": "user", "content": f"What is {a} {word} {b}?"})
        msgs.append({"role": "assistant", "content": f"{a} {op} {b} = {val}."})
        if i % 6 == 5:
            c = rng.randint(1, 9)
            msgs.append({"role": "user", "content": f"And plus {c}?"})
            msgs.append({"role": "assistant", "content": f"{val} + {c} = {val + c}."})
        records.append({"messages": msgs})
    return records


EXTRA_TEXT = [
    "The quick brown fox jumps over the lazy dog. Hello, world! How are you today?",
    "Streaming backpropagation trades recomputation for memory, one chunk at a time.",
    "What is the capital of France? Paris is the capital of France.",
    "Let me think step by step. First add the tens, then the ones.",
    "You are a helpful assistant. Answer the question and explain your reasoning.",
    "def add(a, b):\n    return a + b\n",
    "Thanks! You're welcome. Goodbye.",
]

CASES = [
    ("single_turn", [{"role": "user", "content": "Hi there!"},
                     {"role": "assistant", "content": "Hello! How can I help?"}], {}),
    ("system", [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is 2 + 2?"},
                {"role": "assistant", "content": "2 + 2 = 4."}], {}),
    ("multi_turn", [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Name a colour."},
                    {"role": "assistant", "content": "Blue."},
                    {"role": "user", "content": "Another one?"},
                    {"role": "assistant", "content": "Green."}], {}),
    ("multi_turn_no_system", [{"role": "user", "content": "Count to three."},
                              {"role": "assistant", "content": "1, 2, 3."},
                              {"role": "user", "content": "Now backwards."},
                              {"role": "assistant", "content": "3, 2, 1."},
                              {"role": "user", "content": "Thanks!"},
                              {"role": "assistant", "content": "You're welcome."}], {}),
    ("think_in_content", [{"role": "user", "content": "Is 7 prime?"},
                          {"role": "assistant",
                           "content": "<think>\n7 has no divisors but 1 and 7.\n</think>\n\nYes, 7 is prime."}], {}),
    ("think_in_earlier_turn", [{"role": "user", "content": "Is 9 prime?"},
                               {"role": "assistant", "content": "<think>9 = 3 * 3</think>No: 9 = 3 * 3."},
                               {"role": "user", "content": "And 11?"},
                               {"role": "assistant", "content": "<think>\nNo divisors.\n</think>\n\nYes."}], {}),
    ("reasoning_content", [{"role": "user", "content": "Add 2 and 3."},
                           {"role": "assistant", "content": "5", "reasoning_content": "\n2 + 3 = 5\n"}], {}),
    ("ends_with_user", [{"role": "system", "content": "You answer in French."},
                        {"role": "user", "content": "Hello"},
                        {"role": "assistant", "content": "Bonjour"},
                        {"role": "user", "content": "Goodbye"}], {"add_generation_prompt": True}),
    ("generation_prompt", [{"role": "system", "content": "You are terse."},
                           {"role": "user", "content": "Why is the sky blue?"}], {"add_generation_prompt": True}),
    ("generation_prompt_no_thinking", [{"role": "user", "content": "Why is the sky blue?"}],
     {"add_generation_prompt": True, "enable_thinking": False}),
    ("system_in_the_middle", [{"role": "user", "content": "Hi"},
                              {"role": "assistant", "content": "Hello"},
                              {"role": "system", "content": "From now on, answer in capitals."},
                              {"role": "user", "content": "Bye"},
                              {"role": "assistant", "content": "BYE"}], {}),
    ("tool_responses", [{"role": "user", "content": "What is the weather in Paris?"},
                        {"role": "assistant", "content": "Let me check."},
                        {"role": "tool", "content": "{\"temp\": 21}"},
                        {"role": "tool", "content": "{\"sky\": \"clear\"}"},
                        {"role": "assistant", "content": "It is 21 degrees and clear."}], {}),
    ("tool_response_in_user_turn", [{"role": "user", "content": "Look it up."},
                                    {"role": "assistant", "content": "Looking."},
                                    {"role": "user", "content": "<tool_response>\nfound\n</tool_response>"},
                                    {"role": "assistant", "content": "Found it."}], {}),
    ("whitespace_edges", [{"role": "system", "content": "  padded system  \n"},
                          {"role": "user", "content": "\n\nleading newlines"},
                          {"role": "assistant", "content": "\n\n  indented answer\n\n"},
                          {"role": "user", "content": " x "},
                          {"role": "assistant", "content": " trailing space "}], {}),
    ("unicode", [{"role": "user", "content": "Traduis « bonjour » en 日本語 🙂"},
                 {"role": "assistant", "content": "こんにちは 👋 — voilà."}], {}),
    ("special_text_in_content", [{"role": "user", "content": "What does <|im_end|> mean?"},
                                 {"role": "assistant", "content": "It ends a turn: <|im_end|>."}], {}),
    ("empty_assistant", [{"role": "user", "content": "Say nothing."},
                         {"role": "assistant", "content": ""}], {}),
    ("tool_special_chars", [{"role": "user", "content": "Run it."},
                            {"role": "assistant", "content": "Running."},
                            {"role": "tool", "content": "a < b & \"c\" \\ d\n\tél\u00e8ve \u0001 </tool_response>"},
                            {"role": "assistant", "content": "Done."}], {}),
    ("reasoning_before_tool", [{"role": "user", "content": "Weather?"},
                               {"role": "assistant", "content": "Calling the tool.", "reasoning_content": "I need data."},
                               {"role": "tool", "content": "sunny"},
                               {"role": "assistant", "content": "Sunny.", "reasoning_content": "The tool said sunny."}], {}),
    ("reasoning_null", [{"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello", "reasoning_content": None}], {}),
    ("think_unclosed", [{"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "<think>\nstill thinking"}], {}),
    ("think_close_only", [{"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "\nfirst\n\n</think>\n\n\nanswer</think>tail"}], {}),
    ("assistant_first", [{"role": "assistant", "content": "I start."},
                         {"role": "user", "content": "OK."},
                         {"role": "assistant", "content": "Done."}], {}),
]

# Conversations only Gemma's template is asked about: a lone system message, a tool turn where the
# alternation check lets one through, a system message followed by an assistant.
GEMMA_CASES = [
    ("system_only", [{"role": "system", "content": "Alone."}], {"add_generation_prompt": True}),
    ("tool_at_odd_index", [{"role": "user", "content": "Ping?"}, {"role": "tool", "content": " pong "}],
     {"add_generation_prompt": True}),
    ("system_then_assistant", [{"role": "system", "content": "S"}, {"role": "assistant", "content": "A"}], {}),
    ("system_user_only", [{"role": "system", "content": "Be kind.\n"}, {"role": "user", "content": "  Hi  "}],
     {"add_generation_prompt": True}),
]

# Cases a family cannot express are still rendered: the real templates ignore fields they do not
# know (reasoning_content, enable_thinking), and so must the C++ renderer.

# ---------------------------------------------------------------------------------------------

def train_bytelevel(texts, regex, vocab_size, added):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([AddedToken(c, special=s, normalized=False) for c, s in added])
    return tok


def message_texts(records):
    for r in records:
        for m in r["messages"]:
            yield m["content"]


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def hf_tokenizer(tokenizer_json, config):
    kwargs = {k: v for k, v in config.items() if k in ("bos_token", "eos_token", "pad_token") and v}
    return PreTrainedTokenizerFast(tokenizer_file=tokenizer_json, **kwargs)


def render(tok, template, tagged, messages, opts):
    kw = dict(add_generation_prompt=opts.get("add_generation_prompt", False))
    if "enable_thinking" in opts:
        kw["enable_thinking"] = opts["enable_thinking"]
    text = tok.apply_chat_template(messages, chat_template=template, tokenize=False, **kw)
    tagged_text = tok.apply_chat_template(messages, chat_template=tagged, tokenize=False, **kw)
    assert text == tagged_text, f"tagged template renders differently:\n{text!r}\n{tagged_text!r}"
    enc = tok.apply_chat_template(messages, chat_template=tagged, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True, **kw)
    ids = list(enc["input_ids"])
    assert ids == tok.encode(text, add_special_tokens=False)
    return text, ids, list(enc["assistant_masks"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared", "tokenizers"))
    ap.add_argument("--only", help="re-record one template's cases (e.g. gemma3), keeping the other rows "
                                   "and the trained tokenizers as they are")
    args = ap.parse_args()

    records = tiny_chat_records()
    qwen3_config = json.load(open(os.path.join(args.shared, "qwen3", "tokenizer_config.json"), encoding="utf-8"))
    qwen3_template = qwen3_config["chat_template"]
    tiny_config = {"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>",
                   "pad_token": "<|endoftext|>", "model_max_length": 4096,
                   "tokenizer_class": "Qwen2Tokenizer", "chat_template": qwen3_template}
    if not args.only:
        # The end-to-end example's data and tokenizer.
        os.makedirs(TINY_CHAT, exist_ok=True)
        write_jsonl(os.path.join(TINY_CHAT, "train.jsonl"), records)
        corpus = list(message_texts(records)) * 3 + EXTRA_TEXT * 3
        chatml_added = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
                        ("<tool_call>", False), ("</tool_call>", False), ("<tool_response>", False),
                        ("</tool_response>", False), ("<think>", False), ("</think>", False)]
        tiny = train_bytelevel(corpus, QWEN_REGEX, 448, chatml_added)
        tiny.save(os.path.join(TINY_CHAT, "tokenizer.json"))
        write_json(os.path.join(TINY_CHAT, "tokenizer_config.json"), tiny_config)

        # A Llama-3-style tokenizer: Meta's regex and special tokens around a small trained vocab.
        llama_added = [("<|begin_of_text|>", True), ("<|end_of_text|>", True), ("<|start_header_id|>", True),
                       ("<|end_header_id|>", True), ("<|eom_id|>", True), ("<|eot_id|>", True),
                       ("<|python_tag|>", True)]
        llama_tok = train_bytelevel(corpus, LLAMA3_REGEX, 448, llama_added)
        os.makedirs(os.path.join(FIXTURES, "llama3"), exist_ok=True)
        llama_tok.save(os.path.join(FIXTURES, "llama3", "tokenizer.json"))

    configs = {
        "qwen3": ({"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                   "add_bos_token": False, "chat_template": qwen3_template}, tag_qwen3, "shared:qwen3"),
        "qwen2_5": ({"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                     "add_bos_token": False, "chat_template": QWEN2_5_TEMPLATE}, tag_qwen2_5, "shared:qwen3"),
        "chatml": ({"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                    "chat_template": CHATML_TEMPLATE}, tag_chatml, "shared:qwen3"),
        "llama3_1": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                      "chat_template": LLAMA3_1_TEMPLATE}, tag_llama3_1, "fixture:llama3"),
        "llama3_0": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                      "chat_template": LLAMA3_0_TEMPLATE}, tag_llama3_0, "fixture:llama3"),
        "gemma3": ({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "add_bos_token": True,
                    "add_eos_token": False, "chat_template": GEMMA3_TEMPLATE}, tag_gemma3, "fixture:gemma"),
    }
    tokenizer_files = {"shared:qwen3": os.path.join(args.shared, "qwen3", "tokenizer.json"),
                       "fixture:llama3": os.path.join(FIXTURES, "llama3", "tokenizer.json"),
                       "example:tiny-chat": os.path.join(TINY_CHAT, "tokenizer.json"),
                       # written by tools/tokenizer_fixtures.py (run that first)
                       "fixture:gemma": os.path.join(ROOT, "tests", "fixtures", "tokenizer", "tiny_gemma.json")}
    rows = []
    if args.only:
        assert args.only in configs, f"--only: expected one of {sorted(configs)}"
        with open(os.path.join(FIXTURES, "cases.jsonl"), encoding="utf-8") as f:
            rows = [r for r in map(json.loads, f) if r["config"] != args.only]
        configs = {args.only: configs[args.only]}
    for name, (config, tag, tokenizer_name) in configs.items():
        write_json(os.path.join(FIXTURES, name, "tokenizer_config.json"), config)
        tok = hf_tokenizer(tokenizer_files[tokenizer_name], config)
        tagged = tag(config["chat_template"])
        for case, messages, opts in CASES + (GEMMA_CASES if name == "gemma3" else []):
            row = {"config": name, "tokenizer": tokenizer_name, "case": case, "messages": messages,
                   "add_generation_prompt": opts.get("add_generation_prompt", False)}
            if "enable_thinking" in opts:
                row["enable_thinking"] = opts["enable_thinking"]
            try:
                text, ids, masks = render(tok, config["chat_template"], tagged, messages, opts)
            except jinja2.exceptions.TemplateError as e:
                # Gemma's template refuses conversations that do not alternate user/assistant;
                # the C++ renderer must refuse the same ones.
                assert name == "gemma3", f"{name}/{case}: {e}"
                row["error"] = str(e)
                rows.append(row)
                continue
            row.update(text=text, ids=ids, assistant_masks=masks)
            rows.append(row)
    # The example tokenizer with the Qwen3 template: what the end-to-end example trains on.
    tok = hf_tokenizer(tokenizer_files["example:tiny-chat"], tiny_config)
    for i, rec in enumerate(records[:6] if not args.only else []):
        text, ids, masks = render(tok, qwen3_template, tag_qwen3(qwen3_template), rec["messages"], {})
        rows.append({"config": "qwen3", "tokenizer": "example:tiny-chat", "case": f"tiny_chat_{i}",
                     "messages": rec["messages"], "add_generation_prompt": False, "text": text,
                     "ids": ids, "assistant_masks": masks})
    write_jsonl(os.path.join(FIXTURES, "cases.jsonl"), rows)
    write_json(os.path.join(FIXTURES, "VERSIONS.json"),
               {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                "jinja2": jinja2.__version__, "qwen3_template_from": "shared/tokenizers/qwen3/tokenizer_config.json",
                "gemma3_template": "written from google/gemma-3-*-it tokenizer_config.json (GEMMA3_TEMPLATE)",
                "gemma3_tokenizer": "tests/fixtures/tokenizer/tiny_gemma.json (tools/tokenizer_fixtures.py)"})
    print(f"wrote {len(rows)} cases")


if __name__ == "__main__":
    main()
