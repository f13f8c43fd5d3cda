// One Deno 2.9.6 client of one `kv serve` among several sharing a PostgreSQL database
// (open-deno-kv-cli/tests/serve_postgres.rs). Usage: deno run --unstable-kv -A scale_out.ts MODE URL ARGS...
//
//   count URL WORKERS INCREMENTS  WORKERS concurrent loops, each adding 1 to ["counter"]
//                                 INCREMENTS times by check-and-set (get, atomic().check().set(),
//                                 retry when the check fails)
//   read URL NAME EXPECTED        ["shared", NAME] must hold the JSON value EXPECTED
//   write URL NAME VALUE          sets ["shared", NAME] to the JSON value VALUE
//   watch URL NAME EXPECTED       watches ["shared", NAME]; prints "ready" once the first
//                                 emission (the key absent) arrived, then waits until the key
//                                 holds EXPECTED
//
// Every check is recorded in `results` as true or a "FAIL: ..." string; the last stdout line is
// that object as JSON, which the Rust test asserts on.

const [mode, url, ...args] = Deno.args;
const results: Record<string, true | string> = {};
/// How long any one mode may take before it reports a failure (the Rust side also kills us).
const MODE_DEADLINE_MS = 90_000;

function check(name: string, ok: boolean, detail?: unknown) {
  results[name] = ok ? true : `FAIL: ${JSON.stringify(detail)}`;
}

function timeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: number | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timeout: ${what}`)), ms);
    }),
  ]);
}

/// Adds 1 to ["counter"] by check-and-set; returns how many attempts lost to another writer.
async function increment(kv: Deno.Kv): Promise<number> {
  for (let lost = 0;; lost++) {
    const current = await kv.get<number>(["counter"]);
    const next = (current.value ?? 0) + 1;
    const result = await kv.atomic().check(current).set(["counter"], next).commit();
    if (result.ok) return lost;
  }
}

async function count(kv: Deno.Kv, workers: number, increments: number) {
  let lost = 0;
  await Promise.all(Array.from({ length: workers }, async () => {
    for (let i = 0; i < increments; i++) lost += await increment(kv);
  }));
  check("increments_committed", true);
  // Not a check: how contended the run was, for whoever reads the log.
  console.log(`lost check-and-set races: ${lost}`);
}

async function watch(kv: Deno.Kv, name: string, expected: unknown) {
  const stream = kv.watch([["shared", name]]);
  let first = true;
  for await (const [entry] of stream) {
    if (first) {
      check("first_emission_is_absent", entry.value === null, entry);
      console.log("ready");
      first = false;
    } else if (JSON.stringify(entry.value) === JSON.stringify(expected)) {
      check("watch_saw_write", entry.versionstamp !== null, entry);
      break;
    }
  }
}

const kv = await Deno.openKv(url);
try {
  const run = async () => {
    switch (mode) {
      case "count":
        return count(kv, Number(args[0]), Number(args[1]));
      case "read": {
        const entry = await kv.get(["shared", args[0]]);
        return check(
          "read_sees_write",
          JSON.stringify(entry.value) === args[1],
          entry,
        );
      }
      case "write": {
        const result = await kv.set(["shared", args[0]], JSON.parse(args[1]));
        return check("write_committed", result.ok, result);
      }
      case "watch":
        return watch(kv, args[0], JSON.parse(args[1]));
      default:
        throw new Error(`unknown mode ${mode}`);
    }
  };
  await timeout(run(), MODE_DEADLINE_MS, mode);
} catch (e) {
  results[mode] = `FAIL: threw ${(e as Error)?.stack ?? e}`;
} finally {
  kv.close();
}
console.log(JSON.stringify(results));
// A watch stream still open would keep the process alive.
Deno.exit(0);
