// Validate speedscope files against the JSON schema the npm `speedscope`
// package ships, with ajv (both installed by scripts/provision-tools.sh
// into $TACHYON_TOOLS/node). Then check what the schema cannot say and
// speedscope's importer requires: as many weights as samples, and frame
// indices inside the shared frame table.
// Usage: node validate-speedscope.js TOOLS_NODE_DIR FILE...
// Prints "ok FILE" per valid file; exits 1 with the errors otherwise.
'use strict';
const fs = require('fs');
const path = require('path');
const modules = path.join(process.argv[2], 'node_modules');
const Ajv = require(path.join(modules, 'ajv'));
const schema = JSON.parse(fs.readFileSync(
  path.join(modules, 'speedscope/dist/release/file-format-schema.json'), 'utf8'));
// The schema's root is a $ref to FileFormat.File; strict mode would reject
// the `title` next to each $ref, which the schema generator writes.
const validate = new Ajv({ allErrors: true, strict: false }).compile(schema);
let failed = false;
for (const file of process.argv.slice(3)) {
  const doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  const errors = [];
  if (!validate(doc)) {
    errors.push(...validate.errors.map(e => `${e.instancePath} ${e.message}`));
  }
  const nframes = (doc.shared && doc.shared.frames || []).length;
  (doc.profiles || []).forEach((p, i) => {
    if (p.type !== 'sampled') errors.push(`profile ${i}: type ${p.type}`);
    if (p.samples.length !== p.weights.length) {
      errors.push(`profile ${i}: ${p.samples.length} samples, ${p.weights.length} weights`);
    }
    p.samples.forEach((s, j) => s.forEach(f => {
      if (!Number.isInteger(f) || f < 0 || f >= nframes) {
        errors.push(`profile ${i} sample ${j}: frame ${f} of ${nframes}`);
      }
    }));
    if (p.weights.some(w => !(w > 0))) errors.push(`profile ${i}: a weight is not positive`);
  });
  if (errors.length) {
    failed = true;
    console.log(`INVALID ${file}:\n  ` + errors.slice(0, 20).join('\n  '));
  } else {
    console.log(`ok ${file}`);
  }
}
process.exit(failed ? 1 : 0);
