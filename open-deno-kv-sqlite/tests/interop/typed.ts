// Tagged JSON forms of Deno KV keys and values, shared by the interop scripts. The Rust side
// (tests/deno_interop.rs) builds the same forms from what open-deno-kv-sqlite stores and compares them.
//
// key part: {"string": s} | {"int": "<decimal>"} (bigint) | {"float": "<JS repr>", "bits": "<IEEE BE hex>"}
//           | {"bool": b} | {"bytes": "<hex>"}
// value:    {"string"} | {"number": repr, "bits"} | {"bigint"} | {"bool"} | {"null": null}
//           | {"undefined": null} | {"u64": "<decimal>"} (Deno.KvU64) | {"bytes": hex} (Uint8Array)
//           | {"date": "<ms>"} | {"array": [...]} | {"object": [[k, v], ...]} | {"map": [[k, v], ...]}
//           | {"set": [...]}

export const hex = (b: Uint8Array): string =>
  Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

export function f64bits(x: number): string {
  const dv = new DataView(new ArrayBuffer(8));
  dv.setFloat64(0, x);
  return hex(new Uint8Array(dv.buffer));
}

export const numRepr = (x: number): string => (Object.is(x, -0) ? "-0" : String(x));

export function typedPart(p: Deno.KvKeyPart): Record<string, unknown> {
  if (typeof p === "string") return { string: p };
  if (typeof p === "bigint") return { int: p.toString() };
  if (typeof p === "number") return { float: numRepr(p), bits: f64bits(p) };
  if (typeof p === "boolean") return { bool: p };
  if (p instanceof Uint8Array) return { bytes: hex(p) };
  throw new Error(`not a key part: ${Deno.inspect(p)}`);
}

export const typedKey = (k: Deno.KvKey): unknown[] => k.map(typedPart);

export function typedValue(v: unknown): unknown {
  switch (typeof v) {
    case "string":
      return { string: v };
    case "number":
      return { number: numRepr(v), bits: f64bits(v) };
    case "bigint":
      return { bigint: v.toString() };
    case "boolean":
      return { bool: v };
    case "undefined":
      return { undefined: null };
  }
  if (v === null) return { null: null };
  if (v instanceof Deno.KvU64) return { u64: v.value.toString() };
  if (v instanceof Uint8Array) return { bytes: hex(v) };
  if (v instanceof Date) return { date: numRepr(v.getTime()) };
  if (v instanceof Map) return { map: [...v].map(([k, x]) => [typedValue(k), typedValue(x)]) };
  if (v instanceof Set) return { set: [...v].map(typedValue) };
  if (Array.isArray(v)) return { array: v.map(typedValue) };
  if (typeof v === "object") {
    return { object: Object.entries(v as object).map(([k, x]) => [k, typedValue(x)]) };
  }
  throw new Error(`no tagged form for ${Deno.inspect(v)}`);
}

export async function typedEntries(kv: Deno.Kv): Promise<unknown[]> {
  const out = [];
  for await (const e of kv.list({ prefix: [] })) {
    out.push({ key: typedKey(e.key), value: typedValue(e.value), versionstamp: e.versionstamp });
  }
  return out;
}

/** Prints the result as one JSON line, the last line of stdout. */
export function emit(result: unknown) {
  console.log(JSON.stringify(result));
}
