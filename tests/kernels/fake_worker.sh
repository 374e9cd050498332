#!/bin/sh
# A stand-in for kloop-worker that speaks the protocol without a GPU, so the client's crash, hang and
# restart handling is tested in CI. Ops: hello, hang (never answers), crash (exits), fatal (sticky error).
echo '{"id":0,"ok":true,"op":"ready"}'
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$line" in
    *'"op":"hello"'*) echo "{\"id\":$id,\"ok\":true,\"protocol\":2,\"worker_version\":\"test\",\"device\":{\"name\":\"Fake GPU\",\"arch\":\"sm_90a\",\"sm_count\":4,\"l2_bytes\":1048576},\"pid\":$$}" ;;
    *'"op":"hang"'*) exec sleep 1000 ;;
    *'"op":"crash"'*) exit 9 ;;
    *'"op":"fatal"'*) echo "{\"id\":$id,\"ok\":false,\"fatal\":true,\"error\":\"CUDA_ERROR_ILLEGAL_ADDRESS\"}"; exit 4 ;;
    *'"op":"noise"'*) echo "not json"; echo "{\"id\":99999,\"ok\":true}"; echo "{\"id\":$id,\"ok\":true,\"after_noise\":true}" ;;
    *'"op":"bad"'*) echo "{\"id\":$id,\"ok\":false,\"error\":\"unknown op\"}" ;;
    *'"op":"shutdown"'*) echo "{\"id\":$id,\"ok\":true}"; exit 0 ;;
    *) echo "{\"id\":$id,\"ok\":true,\"pid\":$$}" ;;
  esac
done
