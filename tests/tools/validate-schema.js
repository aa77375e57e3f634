// Validate JSON files against a JSON schema, with ajv (installed by
// scripts/provision-tools.sh into $TACHYON_TOOLS/node).
// Usage: node validate-schema.js TOOLS_NODE_DIR SCHEMA FILE...
// Prints "ok FILE" per valid file; exits 1 with the errors otherwise.
'use strict';
const fs = require('fs');
const path = require('path');
const Ajv = require(path.join(process.argv[2], 'node_modules', 'ajv'));
const schema = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
const validate = new Ajv({ allErrors: true }).compile(schema);
let failed = false;
for (const file of process.argv.slice(4)) {
  const doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  if (validate(doc)) {
    console.log(`ok ${file}`);
  } else {
    failed = true;
    console.log(`INVALID ${file}:\n  ` +
      validate.errors.slice(0, 20).map(e => `${e.instancePath} ${e.message}`).join('\n  '));
  }
}
process.exit(failed ? 1 : 0);
