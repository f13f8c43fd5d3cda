// Test A, Deno's side: opens a database written by open-deno-kv-sqlite, lists every entry, waits for one
// queue message, and prints everything as one line of tagged JSON (see typed.ts).
//
// Usage: deno run -A --unstable-kv read_rust_file.ts <file> [queue wait ms, default 5000]
import { emit, typedEntries, typedValue } from "./typed.ts";

const [path, waitArg] = Deno.args;
if (!path) throw new Error("usage: read_rust_file.ts <file> [queue wait ms]");
const waitMs = Number(waitArg ?? 5000);

const openedAtMs = Date.now();
const kv = await Deno.openKv(path);
// Listed first, before the queue consumer runs, so it shows the file as Deno found it at open.
const entries = await typedEntries(kv);

let received: { payload: unknown; received_at_ms: number } | null = null;
let gotMessage: () => void = () => {};
const messageArrived = new Promise<void>((resolve) => (gotMessage = resolve));
const listening = kv.listenQueue((msg: unknown) => {
  received = { payload: typedValue(msg), received_at_ms: Date.now() };
  gotMessage();
});
let timer: ReturnType<typeof setTimeout> | undefined;
const timedOut = new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs)));
await Promise.race([messageArrived, timedOut]);
clearTimeout(timer);
// Let the handler's completion (the message's removal) commit before closing.
await new Promise((resolve) => setTimeout(resolve, 200));
kv.close();
await listening;

emit({ opened_at_ms: openedAtMs, entries, queue: received });
