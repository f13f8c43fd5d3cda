// Test B, Deno's side: writes a database for open-deno-kv-sqlite to read, then prints what it wrote as one
// line of tagged JSON (see typed.ts): every entry as Deno lists it, the versionstamps of the
// interesting commits, the expiry window, and the queued message.
//
// Usage: deno run -A --unstable-kv write_for_rust.ts <file>
import { emit, typedEntries, typedKey, typedValue } from "./typed.ts";

const path = Deno.args[0];
if (!path) throw new Error("usage: write_for_rust.ts <file>");
const kv = await Deno.openKv(path);

function ok(res: Deno.KvCommitResult | Deno.KvCommitError, what: string): string {
  if (!res.ok) throw new Error(`${what}: commit failed`);
  return res.versionstamp;
}

// Every key part type, one commit.
const keys: Deno.KvKey[] = [
  [new Uint8Array([])],
  [new Uint8Array([0, 0xff, 1])],
  ["k", ""],
  ["k", "a\0b"],
  ["k", "\0"],
  ["k", "héllo wörld ✓ 🦕"],
  ["k", "\u{10ffff}"],
  ["k", 0n],
  ["k", -1n],
  ["k", 255n],
  ["k", 2n ** 64n - 1n],
  ["k", 2n ** 64n],
  ["k", 2n ** 100n],
  ["k", -(2n ** 64n) - 1n],
  ["k", -(2n ** 80n)],
  ["k", 0],
  ["k", -0],
  ["k", 1.5],
  ["k", -2.25],
  ["k", NaN],
  ["k", Infinity],
  ["k", -Infinity],
  ["k", Number.MIN_VALUE],
  ["k", Number.MAX_VALUE],
  ["k", 1e21],
  ["k", 1e-7],
  ["k", false],
  ["k", true],
  ["k", "multi", 42n, 42, true, new Uint8Array([1, 2])],
  [false],
  [true],
];
let op = kv.atomic();
keys.forEach((k, i) => (op = op.set(k, i)));
const keysVs = ok(await op.commit(), "keys");

// Every value kind, one commit.
const values: Record<string, unknown> = {
  "ascii string": "hello",
  "unicode string": "héllo wörld ✓ 🦕",
  "empty string": "",
  "smi": 42,
  "negative smi": -7,
  "double": 3.25,
  "negative zero": -0,
  "NaN": NaN,
  "Infinity": Infinity,
  "big double": 1.7976931348623157e308,
  "bigint": 2n ** 100n,
  "negative bigint": -5n,
  "true": true,
  "false": false,
  "null": null,
  "undefined": undefined,
  "date": new Date(1_700_000_000_123),
  "array": [1, "two", [3n], null],
  "object": { a: 1, b: [true, "x"], c: { nested: "yes" } },
  "map": new Map<unknown, unknown>([["k", 1], [2, "v"]]),
  "set": new Set(["a", 1]),
  "bytes": new Uint8Array([0, 1, 2, 0xff]),
  "empty bytes": new Uint8Array([]),
  "u64 zero": new Deno.KvU64(0n),
  "u64 max": new Deno.KvU64(2n ** 64n - 1n),
};
op = kv.atomic();
for (const [name, v] of Object.entries(values)) op = op.set(["v", name], v);
const valuesVs = ok(await op.commit(), "values");

// sum on KvU64: an existing counter, a missing key, and a wrap-around.
await kv.set(["u64", "counter"], new Deno.KvU64(10n));
await kv.set(["u64", "wrap"], new Deno.KvU64(2n ** 64n - 1n));
const sumVs = ok(
  await kv.atomic()
    .sum(["u64", "counter"], 5n)
    .sum(["u64", "fresh"], 7n)
    .sum(["u64", "wrap"], 2n)
    .commit(),
  "sum",
);

// Check + set: absent check succeeds, a stale check fails, a current one succeeds.
const casFirst = await kv.atomic().check({ key: ["cas"], versionstamp: null }).set(["cas"], "first")
  .commit();
const casStale = await kv.atomic().check({ key: ["cas"], versionstamp: null }).set(["cas"], "stale")
  .commit();
const current = await kv.get(["cas"]);
const casSecond = await kv.atomic()
  .check({ key: ["cas"], versionstamp: current.versionstamp })
  .set(["cas"], "second")
  .commit();

// Expiry: one an hour away, one that will have passed when Rust opens the file.
const expBefore = Date.now();
const expLongVs = ok(await kv.set(["exp", "long"], "stays", { expireIn: 3_600_000 }), "exp long");
const expShortVs = ok(await kv.set(["exp", "short"], "goes", { expireIn: 1 }), "exp short");
const expAfter = Date.now();
await new Promise((resolve) => setTimeout(resolve, 20));

// A versionstamped key.
const stampedVs = ok(
  await kv.atomic().set(["vs", kv.commitVersionstamp()], "stamped").commit(),
  "vs",
);

// One message, due at once; nobody listens here, so it stays queued for Rust.
const message = { hello: "from deno", n: 7, big: 12345678901234567890n };
const enqueueBefore = Date.now();
const enqueueVs = ok(
  await kv.enqueue(message, { delay: 0, keysIfUndelivered: [["dlq", "m1"]], backoffSchedule: [] }),
  "enqueue",
);

// Listed after the short expiry has passed: Deno does not hide expired entries on read.
const entries = await typedEntries(kv);
kv.close();

emit({
  entries,
  commits: {
    keys: keysVs,
    values: valuesVs,
    sum: sumVs,
    cas_first: casFirst.ok ? casFirst.versionstamp : null,
    cas_stale_ok: casStale.ok,
    cas_second: casSecond.ok ? casSecond.versionstamp : null,
    exp_long: expLongVs,
    exp_short: expShortVs,
    stamped: stampedVs,
    enqueue: enqueueVs,
  },
  keys: keys.map(typedKey),
  expiry: { before_ms: expBefore, after_ms: expAfter, long_ms: 3_600_000, short_ms: 1 },
  queue: {
    payload: typedValue(message),
    enqueued_after_ms: enqueueBefore,
    keys_if_undelivered: [typedKey(["dlq", "m1"])],
  },
});
