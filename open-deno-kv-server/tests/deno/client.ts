// Drives a open-deno-kv-server through Deno's own KV Connect client (Deno.openKv("http://...")).
// Usage: deno run --unstable-kv -A client.ts BASE_URL   (BASE_URL ends with "/")
// Every check is recorded in `results` as true or a "FAIL: ..." string; the last stdout line
// is that object as JSON, which tests/deno_client.rs asserts on.

const base = Deno.args[0];
const results: Record<string, true | string> = {};

function check(name: string, ok: boolean, detail?: unknown) {
  results[name] = ok ? true : `FAIL: ${JSON.stringify(detail, (_k, v) =>
    typeof v === "bigint" ? `${v}n` : v)}`;
}

async function errorOf(f: () => Promise<unknown>): Promise<string> {
  try {
    await f();
    return "no error";
  } catch (e) {
    return `${(e as Error).constructor.name}: ${(e as Error).message}`;
  }
}

async function step(name: string, f: () => Promise<void>) {
  try {
    await f();
  } catch (e) {
    results[name] = `FAIL: threw ${(e as Error)?.stack ?? e}`;
  }
}

function timeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([
    p,
    new Promise<T>((_, reject) =>
      setTimeout(() => reject(new Error(`timeout: ${what}`)), ms)
    ),
  ]);
}

const kv = await Deno.openKv(base);

await step("set_get", async () => {
  const r = await kv.set(["users", "alice"], { name: "Alice", age: 30 });
  check("set_ok", r.ok && /^[0-9a-f]{20}$/.test(r.versionstamp), r);
  const g = await kv.get<{ name: string; age: number }>(["users", "alice"]);
  check("get", g.value?.name === "Alice" && g.value?.age === 30 && g.versionstamp === r.versionstamp, g);
  const miss = await kv.get(["nope"]);
  check("get_missing", miss.value === null && miss.versionstamp === null, miss);
  await kv.set(["bytes"], new Uint8Array([1, 2, 3]));
  const b = await kv.get<Uint8Array>(["bytes"]);
  check("bytes_value", b.value instanceof Uint8Array && b.value.join() === "1,2,3", b);
  await kv.delete(["bytes"]);
  check("delete", (await kv.get(["bytes"])).value === null);
});

await step("getMany", async () => {
  await kv.set(["users", "bob"], "Bob");
  const many = await kv.getMany([["users", "alice"], ["users", "bob"], ["nope"]]);
  check("getMany",
    (many[0].value as { name: string }).name === "Alice" && many[1].value === "Bob" && many[2].value === null,
    many);
});

await step("list", async () => {
  const ops = kv.atomic();
  for (let i = 0; i < 25; i++) ops.set(["list", i], i);
  await ops.commit();
  const page = async (cursor?: string) => {
    const it = kv.list<number>({ prefix: ["list"] }, { limit: 10, cursor });
    const values: number[] = [];
    for await (const e of it) values.push(e.value);
    return { values, cursor: it.cursor };
  };
  const p1 = await page();
  const p2 = await page(p1.cursor);
  const p3 = await page(p2.cursor);
  const all = [...p1.values, ...p2.values, ...p3.values];
  check("list_cursor_pages",
    p1.values.length === 10 && p2.values.length === 10 && p3.values.length === 5 &&
      all.every((v, i) => v === i),
    { p1, p2, p3 });
  const batched: number[] = [];
  for await (const e of kv.list<number>({ prefix: ["list"] }, { batchSize: 3 })) batched.push(e.value);
  check("list_batches", batched.length === 25 && batched.every((v, i) => v === i), batched);
  const rev: number[] = [];
  for await (const e of kv.list<number>({ prefix: ["list"] }, { reverse: true, limit: 3 })) rev.push(e.value);
  check("list_reverse", rev.join() === "24,23,22", rev);
  const range: number[] = [];
  for await (const e of kv.list<number>({ start: ["list", 5], end: ["list", 8] })) range.push(e.value);
  check("list_range", range.join() === "5,6,7", range);
});

await step("atomic_checks", async () => {
  const cur = await kv.get(["users", "bob"]);
  const ok1 = await kv.atomic().check(cur).set(["users", "bob"], "Bob2").commit();
  const ok2 = await kv.atomic().check(cur).set(["users", "bob"], "Bob3").commit();
  const now = await kv.get(["users", "bob"]);
  check("atomic_check_ok", ok1.ok === true, ok1);
  check("atomic_check_fails", ok2.ok === false && now.value === "Bob2", { ok2, now });
  const absent = await kv.atomic().check({ key: ["absent"], versionstamp: null }).set(["absent"], 1).commit();
  check("atomic_check_absent", absent.ok === true, absent);
  const op = kv.atomic();
  for (let i = 0; i < 100; i++) op.check({ key: ["chk", i], versionstamp: null });
  const hundred = await op.set(["chk"], 1).commit();
  check("atomic_100_checks", hundred.ok === true, hundred);
});

await step("sum_min_max", async () => {
  await kv.atomic().sum(["c"], 5n).sum(["c"], 10n).commit();
  const s = await kv.get<Deno.KvU64>(["c"]);
  check("sum_u64", s.value instanceof Deno.KvU64 && s.value.value === 15n, s);
  await kv.atomic().max(["c"], 20n).commit();
  check("max_u64", (await kv.get<Deno.KvU64>(["c"])).value?.value === 20n);
  await kv.atomic().min(["c"], 3n).commit();
  check("min_u64", (await kv.get<Deno.KvU64>(["c"])).value?.value === 3n);
  await kv.set(["wrap"], new Deno.KvU64(0xffffffffffffffffn));
  await kv.atomic().sum(["wrap"], 2n).commit();
  check("sum_u64_wraps", (await kv.get<Deno.KvU64>(["wrap"])).value?.value === 1n);
  await kv.atomic().mutate({ type: "sum", key: ["num"], value: 1.5 }).commit();
  await kv.atomic().mutate({ type: "sum", key: ["num"], value: 2 }).commit();
  const n = await kv.get<number>(["num"]);
  check("sum_v8_number", n.value === 3.5, n);
  await kv.atomic().mutate({ type: "sum", key: ["big"], value: 7n }).commit();
  await kv.atomic().mutate({ type: "sum", key: ["big"], value: 8n }).commit();
  const big = await kv.get<bigint>(["big"]);
  check("sum_v8_bigint", big.value === 15n, big);
  await kv.set(["str"], "text");
  const err = await errorOf(() => kv.atomic().sum(["str"], 1n).commit());
  check("sum_wrong_type_error",
    err.includes("status=400") &&
      err.includes("Failed to perform 'sum' mutation on a non-U64 value in the database"),
    err);
});

await step("versionstamped_key", async () => {
  const r = await kv.atomic().set(["log", kv.commitVersionstamp()], "entry").commit();
  const keys: Deno.KvKey[] = [];
  for await (const e of kv.list({ prefix: ["log"] })) keys.push(e.key);
  check("versionstamped_key", r.ok && keys.length === 1 && keys[0][1] === r.versionstamp, { r, keys });
});

await step("expire_in", async () => {
  await kv.set(["exp"], 1, { expireIn: 300 });
  const before = await kv.get(["exp"]);
  await new Promise((res) => setTimeout(res, 1000));
  const after = await kv.get(["exp"]);
  check("expire_in", before.value === 1 && after.value === null, { before, after });
});

await step("watch", async () => {
  await kv.set(["wk", 1], "initial");
  const stream = kv.watch([["wk", 1], ["wk", 2]]);
  const reader = stream.getReader();
  const next = async () => {
    const r = await timeout(reader.read(), 10_000, "watch frame");
    return r.value as Deno.KvEntryMaybe<unknown>[];
  };
  const first = await next();
  check("watch_initial", first[0].value === "initial" && first[1].value === null, first);
  await kv.set(["wk", 2], "second");
  let frame = await next();
  // Frames may coalesce; wait for the one showing the write.
  while (frame[1].value !== "second") frame = await next();
  check("watch_sees_change", frame[1].value === "second", frame);
  check("watch_keeps_unchanged_key", frame[0].value === "initial", frame);
  await reader.cancel();
});

await step("limits", async () => {
  const big = await errorOf(() => kv.set(["big"], new Uint8Array(65_537)));
  check("limit_value_size", big.includes("Value too large (max 65536 bytes)"), big);
  const longKey = await errorOf(() => kv.set(["k".repeat(3000)], 1));
  check("limit_key_size", longKey.includes("Key too large for write (max 2048 bytes)"), longKey);
  const ranges = await errorOf(() =>
    kv.getMany(Array.from({ length: 11 }, (_, i) => ["r", i]))
  );
  check("limit_ranges", ranges.includes("Too many ranges (max 10)"), ranges);
  const enqueue = await errorOf(() => kv.enqueue("x"));
  check("enqueue_refused_by_client", enqueue.includes("Enqueue operations are not supported in KV Connect"), enqueue);
});

kv.close();

// A fresh database per ephemeral open; a named one is shared between opens.
await step("ephemeral", async () => {
  const e1 = await Deno.openKv(base + "ephemeral/:memory:");
  const empty = (await e1.get(["users", "alice"])).value === null;
  await e1.set(["only-here"], 1);
  const e2 = await Deno.openKv(base + "ephemeral/:memory:");
  const fresh = (await e2.get(["only-here"])).value === null;
  check("ephemeral_fresh", empty && fresh && (await e1.get(["only-here"])).value === 1);
  e1.close();
  e2.close();
  const n1 = await Deno.openKv(base + "db/shared");
  await n1.set(["n"], "named");
  const n2 = await Deno.openKv(base + "db/shared");
  check("named_shared", (await n2.get(["n"])).value === "named");
  n1.close();
  n2.close();
});

console.log(JSON.stringify(results));
