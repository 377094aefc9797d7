#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ from the tests' fixtures and the wire samples the tests
and fakes use. Run from anywhere; rewrites only files named seed-*. Findings copied in by hand (crash-*) stay."""
import glob
import hashlib
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def fixture_texts(pattern):
    for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
        with open(path, "rb") as f:
            yield f.read()


def clear():
    for path in glob.glob(os.path.join(CORPUS, "*", "seed-*")):
        os.remove(path)


clear()

# gateway_frame: the frames OpenClaw's clients send (tests/gateway_protocol.rs, tests/support/ws_client.rs).
connect = {
    "minProtocol": 3, "maxProtocol": 4,
    "client": {"id": "cli", "version": "2026.9.6", "platform": "linux", "mode": "cli"},
    "role": "operator", "scopes": ["operator.admin"], "auth": {"token": "secret"},
    "device": {"id": "d1", "publicKey": "AAAA", "signature": "BBBB", "signedAt": 1767000000000, "nonce": "n"},
    "caps": [], "locale": "en-US", "userAgent": "openclaw-cli",
}
for frame in [
    {"type": "req", "id": "1", "method": "connect", "params": connect},
    {"type": "req", "id": "2", "method": "health"},
    {"type": "req", "id": "3", "method": "chat.send", "params": {"sessionKey": "main", "message": "hi", "idempotencyKey": "k1"}},
    {"type": "req", "id": "4", "method": "config.get", "params": {}},
    {"type": "cancel", "id": "3"},
    {"type": "event", "event": "tick"},
]:
    put("gateway_frame", json.dumps(frame))
put("gateway_frame", '{"type":"req","id":"","method":"x"}')
put("gateway_frame", "[1,2,3]")

# config_json5: the OpenClaw docs' example configs and pincer's sample.
for text in fixture_texts("tests/fixtures/openclaw-docs/*.json5"):
    put("config_json5", text)
for text in fixture_texts("scripts/pincer.sample.json5"):
    put("config_json5", text)
put("config_json5", '{ gateway: { port: 18789, auth: { token: "${PINCER_FUZZ}" } }, // c\n agents: { defaults: { model: "openai/gpt-4o" } } }')
put("config_json5", "{ a: [1, 2, 0x10, +Infinity, 'single', ], }")

# cron_expr: expressions from tests/cron_service.rs and src/cron/expr.rs; then 0xFF, an instant, 0xFF, a zone.
for expr in ["0 9 * * *", "*/15 * * * * *", "30 0 12 * * *", "0 8 * * MON-FRI", "0 8 * * 7", "0 0 1 jun *",
             "10-20/5 * * * *", "0 0 15 * 1", "30 2 * * *", "0 0 29 2 *", "0 0 31 4 *", "61 * * * *"]:
    for zone in [0, 1, 3, 4]:
        put("cron_expr", expr.encode() + b"\xff" + struct.pack("<q", 1767225600000 + zone * 3_600_000) + b"\xff" + bytes([zone]))

# Markdown as models write it (tests/reply_chunker.rs, tests/reply_shape.rs).
markdown = [
    "First paragraph is here.\n\nSecond line. More text\nand a tail",
    "```rust\n" + "".join(f"line {i}\n" for i in range(10)) + "```\n",
    "Intro:\n\n~~~python\nprint('x')\n~~~\n\nAfter. **bold** and _it_ and `code` and [link](https://example.com).",
    "# Heading\n- item one\n- item two with <tag> & ampersand\n1. numbered\n\n> quote\n",
    "Text with ~~strike~~ and __under__ and ***both*** and a bare URL https://example.org/a_b?c=d&e=f.",
    "````md\n```\nnested\n```\n````\n",
]
for text in markdown:
    put("formatters", text)
    for head in [bytes([10, 20, 0, 3]), bytes([40, 60, 1, 1]), bytes([5, 5, 2, 16])]:
        put("reply_chunker", head + text.encode())

# memory_chunker: the memory fixtures and markdown notes.
for text in markdown:
    put("memory_chunker", bytes([8, 0]) + text.encode())
    put("memory_chunker", bytes([3, 5]) + text.encode())
put("memory_chunker", bytes([2, 0]) + b"x" * 5000 + b"\n# h\n" + "é".encode() * 2100)

# wordpiece: tokenizer.json (mode 0) and texts (other modes), as tests/memory_wordpiece.rs.
tokenizer = {"version": "1.0", "truncation": None,
             "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
             "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None, "lowercase": True},
             "pre_tokenizer": {"type": "BertPreTokenizer"},
             "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
             "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                       "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "##s": 4}}}
put("wordpiece", b"\x00" + json.dumps(tokenizer).encode())
for text in ["Unaffable!", "CAFÉ 中 the cafes", "[MASK] unaffable [MASK]", "a" * 30, "Ünïcödé ﬁ ㈱ \u0301e"]:
    put("wordpiece", b"\x01" + text.encode())

# telegram_update: getUpdates replies (mode 0) and webhook bodies (mode 1), as tests/support/fake_telegram.rs sends.
message = {"message_id": 7, "date": 1767000000, "chat": {"id": 1001, "type": "private"},
           "from": {"id": 1001, "is_bot": False, "first_name": "Ada", "username": "ada"}, "text": "hello @pincer_bot",
           "entities": [{"type": "mention", "offset": 6, "length": 11}]}
group = dict(message, chat={"id": -100, "type": "supergroup", "is_forum": True}, message_thread_id=5,
             reply_to_message={"message_id": 6, "date": 1767000000, "chat": {"id": -100, "type": "supergroup"}, "text": "earlier"})
photo = dict(message, text=None, caption="look", photo=[{"file_id": "p1", "file_unique_id": "u1", "width": 90, "height": 90, "file_size": 1000}])
voice = dict(message, text=None, voice={"file_id": "v1", "file_unique_id": "u2", "duration": 3, "mime_type": "audio/ogg", "file_size": 5000})
doc = dict(message, text=None, document={"file_id": "d1", "file_unique_id": "u3", "file_name": "a.pdf", "mime_type": "application/pdf", "file_size": 9000})
updates = [{"update_id": 10 + i, "message": m} for i, m in enumerate([message, group, photo, voice, doc])]
put("telegram_update", b"\x00" + json.dumps({"ok": True, "result": updates}).encode())
put("telegram_update", b"\x00" + json.dumps({"ok": False, "error_code": 429, "description": "Too Many Requests", "parameters": {"retry_after": 3}}).encode())
for update in updates:
    put("telegram_update", b"\x01" + json.dumps(update).encode())
put("telegram_update", b"\x01" + json.dumps({"update_id": 99, "channel_post": dict(message, chat={"id": -5, "type": "channel"})}).encode())

# discord_event: gateway frames as tests/support/fake_discord.rs sends them; close code and allow-bots first.
author = {"id": "2000", "username": "ada", "global_name": "Ada"}
create = {"id": "m1", "channel_id": "c1", "guild_id": "g1", "author": author, "member": {"roles": ["r1"], "nick": "A"},
          "content": "<@1000> hello", "mentions": [{"id": "1000", "username": "pincer"}], "type": 0,
          "attachments": [{"id": "a1", "url": "https://cdn.discordapp.com/a.png", "filename": "a.png", "content_type": "image/png", "size": 100}],
          "referenced_message": {"id": "m0", "content": "before", "author": author}, "timestamp": "2026-11-27T10:00:00.000000+00:00"}
for frame in [{"op": 10, "d": {"heartbeat_interval": 41250}},
              {"op": 0, "t": "READY", "s": 1, "d": {"session_id": "s", "resume_gateway_url": "wss://x", "user": {"id": "1000", "username": "pincer"}}},
              {"op": 0, "t": "MESSAGE_CREATE", "s": 2, "d": create},
              {"op": 0, "t": "MESSAGE_CREATE", "s": 3, "d": dict(create, guild_id=None, content="dm")},
              {"op": 0, "t": "CHANNEL_CREATE", "s": 4, "d": {"id": "c1", "type": 11, "parent_id": "c0", "name": "thread"}},
              {"op": 7, "d": None}, {"op": 9, "d": False}, {"op": 11}]:
    put("discord_event", struct.pack("<H", 4004) + b"\x02" + json.dumps(frame).encode())

# slack_event: Socket Mode envelopes and Events API bodies, as tests/support/fake_slack.rs sends them.
event = {"type": "message", "channel": "C1", "channel_type": "channel", "user": "U1", "text": "<@U0BOT> hi", "ts": "1767000000.000100",
         "team": "T0TEAM", "files": [{"name": "a.pdf", "mimetype": "application/pdf", "url_private_download": "https://files.slack.com/a", "size": 10}]}
for payload in [{"type": "event_callback", "team_id": "T0TEAM", "event": event},
                {"type": "event_callback", "event": dict(event, type="app_mention", thread_ts="1767000000.000050")},
                {"type": "event_callback", "event": dict(event, channel_type="im", text="dm", files=[])},
                {"type": "event_callback", "event": dict(event, subtype="bot_message", bot_id="B9")},
                {"type": "url_verification", "challenge": "abc"}]:
    put("slack_event", b"\x00" + json.dumps(payload).encode())
    put("slack_event", b"\x01" + json.dumps({"envelope_id": "e1", "type": "events_api", "payload": payload}).encode())

# llm_stream: reply bodies as tests/support/fake_openai.rs, fake_anthropic.rs and fake_ollama.rs stream them.
def sse(payloads, named=False):
    out = ""
    for p in payloads:
        if named:
            out += f"event: {p['type']}\n"
        out += "data: " + (p if isinstance(p, str) else json.dumps(p)) + "\n\n"
    return out.encode()

openai = sse([{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]},
              {"choices": [{"index": 0, "delta": {"content": "lo"}}]},
              {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{\"cmd\""}}]}}]},
              {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":\"ls\"}"}}]}}]},
              {"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
              "[DONE]"])
anthropic = sse([{"type": "message_start", "message": {"usage": {"input_tokens": 5}}},
                 {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
                 {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}},
                 {"type": "content_block_stop", "index": 0},
                 {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
                 {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hello"}},
                 {"type": "content_block_stop", "index": 1},
                 {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t1", "name": "exec", "input": {}}},
                 {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"cmd\":\"ls\"}"}},
                 {"type": "content_block_stop", "index": 2},
                 {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
                 {"type": "message_stop"}], named=True)
ollama = "".join(json.dumps(line) + "\n" for line in [
    {"model": "m", "message": {"role": "assistant", "content": "Hel", "thinking": "hmm"}, "done": False},
    {"model": "m", "message": {"role": "assistant", "content": "lo", "tool_calls": [{"function": {"name": "exec", "arguments": {"cmd": "ls"}}}]}, "done": False},
    {"model": "m", "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop", "prompt_eval_count": 5, "eval_count": 2}]).encode()
for kind, body in [(0, openai), (1, anthropic), (2, ollama)]:
    put("llm_stream", bytes([kind]) + body)
    put("llm_stream", bytes([kind]) + body + b"\xff" + bytes([1, 7, 3, 200]))
put("llm_stream", b"\x00" + sse([{"error": {"message": "overloaded", "type": "server_error"}}]))
put("llm_stream", b"\x01" + sse([{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}], named=True))

# apply_patch: patches as the tool's tests write them; then 0xFF and the files a.txt, b.md.
files = b"\xffa\nb\nc\nd\n\xff# notes\nold line\n"
for patch in [
    "*** Begin Patch\n*** Add File: new.md\n+hello\n+world\n*** End Patch\n",
    "*** Begin Patch\n*** Update File: a.txt\n@@\n b\n-c\n+C\n d\n*** End Patch\n",
    "*** Begin Patch\n*** Update File: b.md\n*** Move to: c.md\n@@\n-old line\n+new line\n*** End of File\n*** End Patch\n",
    "*** Begin Patch\n*** Delete File: a.txt\n*** Add File: a.txt\n+again\n*** End Patch\n",
    "*** Begin Patch\r\n*** Update File: a.txt\r\n+appended\r\n*** End Patch\r\n",
]:
    put("apply_patch", patch.encode() + files)

# signal_event: signal-cli's SSE stream as tests/support/fake_signal.rs writes it; then 0xFF and chunk lengths.
def signal_dm(text, group=None, mentions=None, attachments=None):
    data = {"timestamp": 1767000000000, "message": text, "expiresInSeconds": 0, "viewOnce": False}
    if group:
        data["groupInfo"] = {"groupId": group, "groupName": "Ops", "revision": 3, "type": "DELIVER"}
    if mentions:
        data["mentions"] = mentions
    if attachments:
        data["attachments"] = attachments
    return {"envelope": {"source": "+15550002222", "sourceNumber": "+15550002222",
                         "sourceUuid": "5f0c1d2e-0000-4000-8000-000000000002", "sourceName": "Ada", "sourceDevice": 1,
                         "timestamp": 1767000000000, "dataMessage": data}, "account": "+15550001111"}

signal_payloads = [
    signal_dm("hello"),
    signal_dm("\ufffc ping", group="Z3JvdXA=", mentions=[{"name": "Pincer", "number": "+15550001111",
              "uuid": "5f0c1d2e-0000-4000-8000-000000000001", "start": 0, "length": 1}]),
    signal_dm("see file", attachments=[{"contentType": "image/png", "filename": "a.png", "id": "att1", "size": 100}]),
    {"envelope": {"source": "+15550002222", "typingMessage": {"action": "STARTED", "timestamp": 1}}, "account": "+15550001111"},
    {"exception": {"message": "decrypt failed", "type": "ProtocolInvalidMessageException"}},
]
stream = b"".join(b"event:receive\ndata:" + json.dumps(p).encode() + b"\n\n" for p in signal_payloads)
put("signal_event", stream)
put("signal_event", b":\n\n" + stream + b"\xff" + bytes([3, 1, 40, 7]))
put("signal_event", b"event:receive\r\ndata:{\"envelope\":\r\ndata:{}}\r\n\r\n")

# wav_voice: a selector byte (even: WAV; odd: headerless PCM, rate and channels from its bits), then the audio:
# short WAVs as OpenAI's /audio/speech sends them (16-bit PCM and 32-bit float; a streamed WAV's unknown sizes).
import math


def wav(rate, channels, samples, float32=False, streamed=False, extensible=False):
    width = 4 if float32 else 2
    frames = []
    for i in range(samples):
        v = 0.4 * math.sin(2 * math.pi * 440 * i / rate)
        frames.append((struct.pack("<f", v) if float32 else struct.pack("<h", int(v * 32767))) * channels)
    data = b"".join(frames)
    tag = 0xFFFE if extensible else (3 if float32 else 1)
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * channels * width, channels * width, width * 8)
    if extensible:
        fmt += struct.pack("<HHI", 22, width * 8, 3) + struct.pack("<H", 3 if float32 else 1) + bytes(14)
    size = 0xFFFFFFFF if streamed else len(data)
    riff = 0xFFFFFFFF if streamed else 4 + 8 + len(fmt) + 8 + len(data)
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", size) + data)


put("wav_voice", b"\x00" + wav(24000, 1, 2400))
put("wav_voice", b"\x00" + wav(16000, 2, 1600, float32=True))
put("wav_voice", b"\x00" + wav(24000, 1, 1200, streamed=True))
put("wav_voice", b"\x00" + wav(44100, 1, 2205, extensible=True))
put("wav_voice", b"\x00" + b"RIFF" + struct.pack("<I", 40) + b"WAVE" + b"LIST" + struct.pack("<I", 4) + b"INFO"
    + wav(8000, 1, 400)[12:])
put("wav_voice", bytes([9]) + wav(24000, 1, 2400)[44:])

print("seed corpora written under", CORPUS)
