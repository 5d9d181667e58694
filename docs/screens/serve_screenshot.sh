#!/usr/bin/env bash
# Evidence for `resenv-tui --serve` (not part of CI): start a run of the starter suite in a fresh HOME,
# serve its dashboard, and let headless Chromium take docs/screens/serve.png while jobs are running.
#   docs/screens/serve_screenshot.sh [PORT]        (from the repository root, with .venv installed)
# Stops only what it started, by PID.
set -euo pipefail
cd "$(dirname "$0")/../.."
port="${1:-8765}"
out="docs/screens/serve.png"
home="$(mktemp -d)"
db="$home/.local/share/resenv/resenv.db"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

HOME="$home" .venv/bin/resenv run --display none >"$home/run.log" 2>&1 &
pids+=($!)
echo "run: starter suite, store $db"
# Wait for a job that is past its checkout (the dashboard then has a phase, output and tiers to show).
for _ in $(seq 600); do
    running=$(sqlite3 "file:$db?mode=ro" "SELECT COUNT(*) FROM jobs WHERE state = 'running'" 2>/dev/null || echo 0)
    done_jobs=$(sqlite3 "file:$db?mode=ro" "SELECT COUNT(*) FROM jobs WHERE state = 'done'" 2>/dev/null || echo 0)
    [ "${running:-0}" -gt 0 ] && [ "${done_jobs:-0}" -gt 0 ] && break
    sleep 0.5
done
[ "${running:-0}" -gt 0 ] || { echo "no job is running: see $home/run.log" >&2; exit 1; }

.venv/bin/resenv-tui --serve --db "$db" --port "$port" >"$home/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 120); do grep -q "^serving run" "$home/serve.log" && break; sleep 0.5; done
cat "$home/serve.log"
url="http://127.0.0.1:$port/"

# Headless Chromium driven over its DevTools protocol (aiohttp, a textual-serve dependency): the shot is
# taken once the page has had the dashboard's first bytes and they have painted, not after a guess.
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,800 \
    --remote-debugging-port=0 --user-data-dir="$home/chromium" about:blank 2>"$home/chromium.log" &
pids+=($!)
for _ in $(seq 120); do grep -q "DevTools listening on" "$home/chromium.log" && break; sleep 0.5; done
devtools=$(grep -o "ws://[^ ]*" "$home/chromium.log" | head -1)
.venv/bin/python - "$devtools" "$url" "$PWD/$out" <<'PY'
import asyncio, base64, json, sys

import aiohttp

DEVTOOLS, URL, OUT = sys.argv[1:]


async def main() -> None:
    async with aiohttp.ClientSession() as session:
        port = DEVTOOLS.split(":")[2].split("/")[0]
        async with session.put(f"http://127.0.0.1:{port}/json/new?about:blank") as reply:
            page = await reply.json(content_type=None)
        async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            ids = iter(range(1, 10**6))

            async def call(method: str, **params):
                number = next(ids)
                await ws.send_json({"id": number, "method": method, "params": params})
                async for message in ws:
                    data = json.loads(message.data)
                    if data.get("id") == number:
                        return data.get("result", {})

            await call("Page.navigate", url=URL)
            painted = "document.body.classList.contains('-first-byte')"
            for _ in range(600):  # up to a minute for the dashboard process to start and paint
                result = await call("Runtime.evaluate", expression=painted, returnByValue=True)
                if result.get("result", {}).get("value"):
                    break
                await asyncio.sleep(0.1)
            else:
                sys.exit("the dashboard never painted in the browser")
            await asyncio.sleep(3)  # the first frames and a refresh of the live store
            shot = await call("Page.captureScreenshot", format="png")
            open(OUT, "wb").write(base64.b64decode(shot["data"]))


asyncio.run(main())
PY
sqlite3 "file:$db?mode=ro" "SELECT repo_id, state FROM jobs ORDER BY id" | tr '\n' ' '
echo
echo "screenshot: $out"
