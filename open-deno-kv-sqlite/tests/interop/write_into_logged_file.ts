// The change log's interop test, Deno's side: opens a file whose change log open-deno-kv-sqlite
// keeps (two tables Deno does not know), sets one key, lists the file, and prints one line of
// JSON: the commit's versionstamp and the keys it saw.
//
// Usage: deno run -A --unstable-kv write_into_logged_file.ts <file>
const [path] = Deno.args;
if (!path) throw new Error("usage: write_into_logged_file.ts <file>");

const kv = await Deno.openKv(path);
const result = await kv.set(["from_deno"], "hello");
const keys = [];
for await (const entry of kv.list({ prefix: [] })) keys.push(entry.key);
kv.close();
console.log(JSON.stringify({ versionstamp: result.versionstamp, keys }));
