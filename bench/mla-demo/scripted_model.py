#!/usr/bin/env python3
"""A scripted stand-in for an LLM: an OpenAI-compatible chat-completions server on loopback (Python stdlib only)
that replays one fixed reply written by a person, for recording the MLA hypothesis session with `kloop run --agent
llm:vllm ...` on a machine without a model or internet. It is NOT a model: it reads nothing of the prompt to decide
what to say.

Every request gets logged (one JSON line: time, path, the request body) to --log, the evidence of what the prompt
carried. The first chat request is answered with --reply (its "{candidate}" replaced by the candidate source in a
```kl-candidate block); later ones with a reply that says there is nothing more, without a block (the agent records
it as unusable and stops asking). Streaming (SSE, as the client asks with "stream": true, usage in a last chunk when
stream_options.include_usage) and whole JSON replies. Usage is not reported: a stand-in has no token counts.
The port it listens on (0: any free one) is written to --port-file once it accepts connections."""
import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NO_MORE = ("NOTE: nothing further from the scripted stand-in. It replays one reply written by a person and has no "
           "other change to offer; the tuner's search of the candidate's parameters is what remains.")


def chunk(model, created, delta, finish=None):
    return {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # a streamed body ends when the connection closes

    def log_message(self, fmt, *args):
        sys.stderr.write("scripted_model: " + (fmt % args) + "\n")

    def reply_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            self.reply_json(200, {"object": "list", "data": [{"id": self.server.model, "object": "model"}]})
        else:
            self.reply_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
        try:
            body = json.loads(raw)
        except json.JSONDecodeError as e:
            self.reply_json(400, {"error": {"message": f"request body is not JSON: {e}", "type": "invalid_request"}})
            return
        with self.server.lock:
            self.server.calls += 1
            call = self.server.calls
            with open(self.server.log, "a") as f:
                f.write(json.dumps({"t": time.time(), "call": call, "path": self.path, "body": body}) + "\n")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.reply_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        text = self.server.reply if call == 1 else NO_MORE
        model = self.server.model
        created = int(time.time())
        if not body.get("stream"):
            self.reply_json(200, {"id": "chatcmpl-scripted", "object": "chat.completion", "created": created,
                                  "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                                                               "message": {"role": "assistant", "content": text}}]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        events = [chunk(model, created, {"role": "assistant", "content": ""})]
        events += [chunk(model, created, {"content": text[i:i + 256]}) for i in range(0, len(text), 256)]
        events.append(chunk(model, created, {}, "stop"))
        for e in events:
            self.wfile.write(b"data: " + json.dumps(e).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reply", required=True, help="the reply text; {candidate} marks where the source goes")
    ap.add_argument("--candidate", required=True, help="the candidate .cu the reply carries")
    ap.add_argument("--log", required=True, help="JSON lines: every request received")
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="scripted-stand-in-human-reply")
    args = ap.parse_args()
    with open(args.reply) as f:
        template = f.read()
    with open(args.candidate) as f:
        source = f.read()
    if "{candidate}" not in template:
        sys.exit(f"scripted_model: {args.reply} has no {{candidate}} marker")
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.reply = template.replace("{candidate}", "```kl-candidate\n" + source.rstrip("\n") + "\n```")
    server.model = args.model
    server.log = args.log
    server.lock = threading.Lock()
    server.calls = 0
    open(args.log, "w").close()
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
