#!/usr/bin/env node
// Verify Agent Cards with the official JS SDK (@a2a-js/sdk verifyAgentCardSignature).
//
//   NODE_PATH=$ORACLE/node/node_modules node tests/oracle/js_verify.mjs --jwks JWKS_FILE CARD_FILE...
//
// ES modules ignore NODE_PATH, so this script resolves the SDK itself: from each
// directory in NODE_PATH, then $AGENTCARD_ORACLE/node/node_modules, then the
// default cache ${AGENTCARD_CACHE:-$HOME/.cache/agentcard-operator}/oracle/node/node_modules.
//
// For each card: JSON.parse (top level must be an object); unless
// --signature-only, the top-level REQUIRED fields must be present and non-empty
// (name, description, version, supportedInterfaces, capabilities,
// defaultInputModes, defaultOutputModes, skills; the JS SDK itself checks none);
// then verifyAgentCardSignature with a key provider that looks the protected
// header's kid up in the JWKS file (jku ignored). The SDK parses the card
// leniently (AgentCard.fromJSON drops unknown fields), as JS clients do.
//
// Prints one JSON line per card:
//   {"file": ..., "valid": bool, "kid": <kid that verified or null>, "error": <reason or null>}
// With --all-kids a "kids" list is added: the kid of every signature that
// verifies on its own (the card re-checked with only that signature).
// Exit status: 0 iff every card is valid, 1 if any is not, 2 on a usage error,
// an unreadable JWKS file or an SDK that cannot be found.

import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';
import { pathToFileURL } from 'node:url';

const REQUIRED_NONEMPTY = [
  'name', 'description', 'version', 'supportedInterfaces', 'capabilities',
  'defaultInputModes', 'defaultOutputModes', 'skills',
];

function usage(msg) {
  if (msg) process.stderr.write(`js_verify: ${msg}\n`);
  process.stderr.write('usage: js_verify.mjs --jwks JWKS_FILE [--signature-only] [--all-kids] CARD_FILE...\n');
  process.exit(2);
}

function nodeModulesDirs() {
  const dirs = (process.env.NODE_PATH ?? '').split(delimiter).filter(Boolean);
  if (process.env.AGENTCARD_ORACLE) dirs.push(join(process.env.AGENTCARD_ORACLE, 'node', 'node_modules'));
  const cache = process.env.AGENTCARD_CACHE ?? join(homedir(), '.cache', 'agentcard-operator');
  dirs.push(join(cache, 'oracle', 'node', 'node_modules'));
  return dirs;
}

async function loadSdk() {
  for (const dir of nodeModulesDirs()) {
    const pkgDir = join(dir, '@a2a-js', 'sdk');
    const pkgFile = join(pkgDir, 'package.json');
    if (!existsSync(pkgFile)) continue;
    const pkg = JSON.parse(readFileSync(pkgFile, 'utf8'));
    const entry = pkg.exports?.['.']?.import ?? pkg.module ?? pkg.main;
    const sdk = await import(pathToFileURL(join(pkgDir, entry)).href);
    return { sdk, version: pkg.version, dir: pkgDir };
  }
  process.stderr.write(`js_verify: @a2a-js/sdk not found in ${nodeModulesDirs().join(', ')}; run tests/oracle/setup\n`);
  process.exit(2);
}

function loadJwks(path) {
  const jwks = JSON.parse(readFileSync(path, 'utf8'));
  if (!jwks || !Array.isArray(jwks.keys)) throw new Error(`${path}: not a JWK Set (no "keys" array)`);
  const byKid = new Map();
  for (const jwk of jwks.keys) {
    if (jwk && typeof jwk.kid === 'string') byKid.set(jwk.kid, jwk);
  }
  if (byKid.size === 0) throw new Error(`${path}: no key with a "kid"`);
  return byKid;
}

function isEmpty(v) {
  if (v === undefined || v === null || v === '') return true;
  if (Array.isArray(v)) return v.length === 0;
  return false; // capabilities: {} is present (all its fields are optional)
}

// The SDK reports each failed signature with console.debug, which goes to
// stdout; capture it instead (it becomes part of "error").
let debugSink = null;
console.debug = (...args) => {
  if (debugSink) {
    const err = args.find((a) => a instanceof Error);
    debugSink.push(err ? `${err.name}: ${err.message}` : args.map(String).join(' '));
  }
};

function keyProvider(keys, tried, unknown) {
  return async (kid) => {
    if (!keys.has(kid)) {
      unknown.push(String(kid));
      throw new Error(`kid ${JSON.stringify(kid)} not in JWKS`);
    }
    tried.push(kid);
    return keys.get(kid);
  };
}

// Kids of the signatures that verify on their own (one SDK call each).
async function kidsVerifyingAlone(card, keys, verifyAgentCardSignature) {
  const kids = [];
  for (const sig of Array.isArray(card.signatures) ? card.signatures : []) {
    const tried = [];
    debugSink = [];
    try {
      await verifyAgentCardSignature(keyProvider(keys, tried, []))({ ...card, signatures: [sig] });
      kids.push(tried[tried.length - 1]);
    } catch {
      // this signature does not verify
    } finally {
      debugSink = null;
    }
  }
  return kids;
}

async function checkCard(path, keys, verifyAgentCardSignature, signatureOnly, allKids) {
  const result = { file: path, valid: false, kid: null, error: null };
  let card;
  try {
    card = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    result.error = `read/json: ${e.message}`;
    return result;
  }
  if (card === null || typeof card !== 'object' || Array.isArray(card)) {
    result.error = 'json: top level is not an object';
    return result;
  }
  const errors = [];
  if (!signatureOnly) {
    const missing = REQUIRED_NONEMPTY.filter((f) => isEmpty(card[f]));
    if (missing.length) errors.push(`REQUIRED fields missing or empty: ${missing.join(', ')}`);
  }

  // verifyAgentCardSignature asks for one key per signature, in order, and
  // returns at the first that verifies: the last kid handed out verified.
  const tried = [];
  const unknown = [];
  const verifier = verifyAgentCardSignature(keyProvider(keys, tried, unknown));
  debugSink = [];
  try {
    await verifier(card);
    result.kid = tried[tried.length - 1];
  } catch (e) {
    let detail = `${e.name}: ${e.message}`;
    if (debugSink.length) detail += ` (${debugSink.join(' | ')})`;
    errors.unshift(detail);
  } finally {
    debugSink = null;
  }
  if (allKids) result.kids = await kidsVerifyingAlone(card, keys, verifyAgentCardSignature);
  if (errors.length) result.error = errors.join('; ');
  else result.valid = true;
  return result;
}

async function main() {
  const args = process.argv.slice(2);
  let jwksPath = null;
  let signatureOnly = false;
  let allKids = false;
  const cards = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--jwks') {
      jwksPath = args[++i];
      if (jwksPath === undefined) usage('--jwks needs a file');
    } else if (a.startsWith('--jwks=')) jwksPath = a.slice('--jwks='.length);
    else if (a === '--signature-only') signatureOnly = true;
    else if (a === '--all-kids') allKids = true;
    else if (a === '--') {
      cards.push(...args.slice(i + 1));
      break;
    }
    else if (a.startsWith('--')) usage(`unknown option ${a}`);
    else cards.push(a);
  }
  if (!jwksPath) usage('--jwks is required');
  if (cards.length === 0) usage('no CARD_FILE');

  let keys;
  try {
    keys = loadJwks(jwksPath);
  } catch (e) {
    process.stderr.write(`js_verify: cannot load JWKS: ${e.message}\n`);
    process.exit(2);
  }
  const { sdk } = await loadSdk();
  if (typeof sdk.verifyAgentCardSignature !== 'function') {
    process.stderr.write('js_verify: this @a2a-js/sdk has no verifyAgentCardSignature\n');
    process.exit(2);
  }
  let allValid = true;
  for (const path of cards) {
    const result = await checkCard(path, keys, sdk.verifyAgentCardSignature, signatureOnly, allKids);
    allValid &&= result.valid;
    process.stdout.write(JSON.stringify(result) + '\n');
  }
  process.exitCode = allValid ? 0 : 1;
}

await main();
