// Node.js with the official KV Connect client `@deno/kv` against a KV Connect server.
//
//   node client.mjs http://127.0.0.1:PORT/     (DENO_KV_ACCESS_TOKEN in the environment,
//                                              NODE_PATH or a node_modules beside it with @deno/kv)
//
// Runs open, get, getMany, set, delete, atomic checks, u64 sum, list (prefix, cursor, reverse,
// limit), expireIn and watch, checking every result, and prints one JSON object line
// `{"check name": true | "what went wrong", ...}` as its last line. It exits 0 whenever it could
// print that line: the Rust test decides from the JSON. Every key lives under a fresh random
// prefix, so runs against a shared database do not see each other.

import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";

// `@deno/kv` is found through NODE_PATH (ES module imports ignore it; createRequire honours it).
const require = createRequire(import.meta.url);
const { openKv, KvU64 } = require("@deno/kv");

const url = process.argv[2];
const accessToken = process.env.DENO_KV_ACCESS_TOKEN;
const results = {};

/** Records `name` as passed if `fn` returns true, else the reason. */
async function check(name, fn) {
  try {
    const outcome = await fn();
    results[name] = outcome === true ? true : `returned ${JSON.stringify(outcome)}`;
  } catch (err) {
    results[name] = `threw ${err?.stack ?? err}`;
  }
}

const same = (a, b) => JSON.stringify(a, bigints) === JSON.stringify(b, bigints);
function bigints(_key, value) {
  return typeof value === "bigint" ? `${value}n` : value;
}

async function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

let kv;
await check("open", async () => {
  kv = await openKv(url, { accessToken, maxRetries: 2 });
  return typeof kv.get === "function";
});
if (kv === undefined) {
  console.log(JSON.stringify(results));
  process.exit(0);
}

const run = randomUUID();
const k = (...parts) => [run, ...parts];

await check("set_and_get", async () => {
  const set = await kv.set(k("greeting"), { text: "hello", n: 42, big: 7n, list: [1, "two"] });
  const got = await kv.get(k("greeting"));
  return set.ok === true && got.versionstamp === set.versionstamp &&
    same(got.key, k("greeting")) &&
    same(got.value, { text: "hello", n: 42, big: 7n, list: [1, "two"] });
});

await check("get_missing", async () => {
  const got = await kv.get(k("missing"));
  return got.value === null && got.versionstamp === null;
});

await check("bytes_value", async () => {
  await kv.set(k("bytes"), new Uint8Array([0, 1, 255]));
  const got = await kv.get(k("bytes"));
  return got.value instanceof Uint8Array && same([...got.value], [0, 1, 255]);
});

await check("getMany", async () => {
  await kv.set(k("many", 1), "one");
  await kv.set(k("many", 2), "two");
  const got = await kv.getMany([k("many", 1), k("missing"), k("many", 2)]);
  return got.length === 3 && got[0].value === "one" && got[1].value === null &&
    got[1].versionstamp === null && got[2].value === "two";
});

await check("delete", async () => {
  await kv.set(k("doomed"), 1);
  await kv.delete(k("doomed"));
  const got = await kv.get(k("doomed"));
  return got.value === null && got.versionstamp === null;
});

await check("atomic_check_ok", async () => {
  const before = await kv.get(k("greeting"));
  const result = await kv.atomic().check(before).set(k("greeting"), "changed").commit();
  const after = await kv.get(k("greeting"));
  return result.ok === true && after.value === "changed" &&
    after.versionstamp === result.versionstamp && result.versionstamp > before.versionstamp;
});

await check("atomic_check_fails", async () => {
  const stale = { key: k("greeting"), versionstamp: "00000000000000010000" };
  const result = await kv.atomic().check(stale).set(k("greeting"), "lost").commit();
  const after = await kv.get(k("greeting"));
  return result.ok === false && after.value === "changed";
});

await check("atomic_check_absent", async () => {
  const first = await kv.atomic().check({ key: k("once"), versionstamp: null })
    .set(k("once"), "first").commit();
  const second = await kv.atomic().check({ key: k("once"), versionstamp: null })
    .set(k("once"), "second").commit();
  const got = await kv.get(k("once"));
  return first.ok === true && second.ok === false && got.value === "first";
});

await check("sum_u64", async () => {
  await kv.atomic().sum(k("counter"), 5n).commit();
  await kv.atomic().sum(k("counter"), 37n).commit();
  const got = await kv.get(k("counter"));
  return got.value instanceof KvU64 && got.value.value === 42n;
});

await check("sum_u64_wraps", async () => {
  await kv.set(k("wrap"), new KvU64(0xffffffffffffffffn));
  await kv.atomic().sum(k("wrap"), 2n).commit();
  const got = await kv.get(k("wrap"));
  return got.value.value === 1n;
});

// Ten entries for the list checks: ["list", 0n] .. ["list", 9n], values 0..9.
for (let i = 0; i < 10; i++) {
  await kv.set(k("list", BigInt(i)), i);
}
const listed = async (selector, options) => {
  const entries = [];
  const iter = kv.list(selector, options);
  for await (const entry of iter) entries.push(entry.value);
  return { entries, cursor: iter.cursor };
};

await check("list_prefix", async () => {
  const { entries } = await listed({ prefix: k("list") });
  return same(entries, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
});

await check("list_limit_and_cursor", async () => {
  const page1 = await listed({ prefix: k("list") }, { limit: 4 });
  const page2 = await listed({ prefix: k("list") }, { limit: 4, cursor: page1.cursor });
  const page3 = await listed({ prefix: k("list") }, { limit: 4, cursor: page2.cursor });
  return same(page1.entries, [0, 1, 2, 3]) && same(page2.entries, [4, 5, 6, 7]) &&
    same(page3.entries, [8, 9]);
});

await check("list_reverse", async () => {
  const { entries } = await listed({ prefix: k("list") }, { reverse: true, limit: 3 });
  return same(entries, [9, 8, 7]);
});

await check("list_range", async () => {
  const { entries } = await listed({ start: k("list", 2n), end: k("list", 5n) });
  return same(entries, [2, 3, 4]);
});

await check("list_small_batches", async () => {
  const { entries } = await listed({ prefix: k("list") }, { batchSize: 3 });
  return same(entries, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
});

await check("expire_in", async () => {
  await kv.set(k("short"), "soon gone", { expireIn: 300 });
  const before = await kv.get(k("short"));
  await new Promise((resolve) => setTimeout(resolve, 800));
  const after = await kv.get(k("short"));
  return before.value === "soon gone" && after.value === null && after.versionstamp === null;
});

await check("watch", async () => {
  await kv.set(k("watched"), "v1");
  const stream = kv.watch([k("watched"), k("never")]);
  const reader = stream.getReader();
  try {
    const first = await withTimeout(reader.read(), 10_000, "first watch emission");
    const initial = first.value;
    const okInitial = initial.length === 2 && initial[0].value === "v1" &&
      initial[1].value === null && initial[1].versionstamp === null;
    const write = await kv.set(k("watched"), "v2");
    // Emissions may repeat a state; wait for the new one.
    for (let i = 0; i < 20; i++) {
      const next = await withTimeout(reader.read(), 10_000, "watch emission after a set");
      const [watched, never] = next.value;
      if (watched.value === "v2") {
        return okInitial && watched.versionstamp === write.versionstamp && never.value === null;
      }
    }
    return "the change never arrived";
  } finally {
    await reader.cancel();
  }
});

kv.close();
console.log(JSON.stringify(results));
