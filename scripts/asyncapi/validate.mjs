// Parse an AsyncAPI document with the official parser (@asyncapi/parser) and print its
// diagnostics, one JSON object a line; exit 1 if any is an error (severity 0).
// Usage: node scripts/asyncapi/validate.mjs docs/asyncapi.yaml  (scripts/ensure_asyncapi_parser.py installs the parser)
import { readFileSync } from "node:fs";
import { Parser } from "@asyncapi/parser";

const path = process.argv[2];
const { document, diagnostics } = await new Parser().parse(readFileSync(path, "utf8"), { source: path });
for (const d of diagnostics) {
  console.log(JSON.stringify({ severity: d.severity, code: d.code, message: d.message, path: d.path.join("/") }));
}
const errors = diagnostics.filter((d) => d.severity === 0).length;
console.error(`${path}: ${errors} error(s), ${diagnostics.length - errors} other diagnostic(s)`);
process.exit(errors || !document ? 1 : 0);
