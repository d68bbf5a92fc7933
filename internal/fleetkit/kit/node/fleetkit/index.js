// fleetkit: helpers for node blocks run by codellm (API-compatible with trip2g's fleetkit).
//
// The same functions, under the same snake_case names, as the python module, so a role can move between
// the two languages without relearning the API. The last block's stdout is the whole contract: one JSON
// line {"changes": [...], "answer": "..."}.
//
//   const fleetkit = require('fleetkit');
//   fleetkit.emit([fleetkit.note('a.md', {title: 'T'}, '# T\n')], 'wrote 1');
//
// codellm ships this module inside its binary and puts it on NODE_PATH, read-only, for every block.
// YAML goes through the `yaml` package in YAML 1.1 mode, as on trip2g: under 1.2 a timestamp-shaped
// string would be written bare and read back as a date, and 'yes' as true.
'use strict';

const fs = require('fs');
const YAML = require('yaml');

const YAML_OPTIONS = { version: '1.1' };

function render(meta, body = '') {
  if (!meta || Object.keys(meta).length === 0) return body;
  const dumped = YAML.stringify(meta, YAML_OPTIONS);
  return '---\n' + dumped.replace(/\n$/, '') + '\n---\n' + body;
}

function write(path, content) {
  return { path, content };
}

function note(path, meta, body = '') {
  return write(path, render(meta, body));
}

function patch(path, find, replace) {
  return { path, find, replace };
}

function emit(changes = [], answer = '') {
  console.log(JSON.stringify({ changes: Array.from(changes), answer }));
}

function bag() {
  const where = process.env.FLEET_INPUT;
  if (!where) return {};
  return JSON.parse(fs.readFileSync(where, 'utf8'));
}

function frontmatter() {
  return bag().frontmatter || {};
}

// The fields codellm unsealed for this run, by frontmatter field name; frontmatter() keeps the ciphertext,
// so dumping the role's configuration does not dump the plaintext. {} outside a delivery.
function secrets() {
  return bag().secrets || {};
}

function parse_frontmatter(content) {
  if (!content.startsWith('---\n')) return {};
  const end = content.indexOf('\n---', 3);
  if (end < 0) return {};
  const loaded = YAML.parse(content.slice(4, end), YAML_OPTIONS);
  if (!loaded || typeof loaded !== 'object' || Array.isArray(loaded)) return {};
  return loaded;
}

function note_frontmatter(path) {
  const current = bag();
  for (const section of ['attached_notes', 'changed_files']) {
    for (const entry of current[section] || []) {
      if (entry.path === path) return parse_frontmatter(entry.content || '');
    }
  }
  throw new Error(`note '${path}' is not in the delivery bag; widen the role's attach_notes to cover it`);
}

module.exports = {
  render, note, write, patch, emit, bag,
  frontmatter, secrets, note_frontmatter, parse_frontmatter,
};
