#!/usr/bin/env node
/*
 * validate.js — validate rendered Kubernetes objects against the
 * Kubernetes API schemas, offline, in two independent passes:
 *
 *  1. schema: kubernetes-models' validators (JSON Schema generated from the
 *     Kubernetes OpenAPI spec, compiled with ajv): types, formats, enums,
 *     required fields of every nested object;
 *  2. strict: the same objects as TypeScript object literals typed with
 *     kubernetes-models' generated interfaces and compiled with tsc, whose
 *     excess-property check rejects unknown (e.g. misspelt) fields at any
 *     depth — which the JSON Schemas allow, as the API server's
 *     non-strict decoding does, but which would be silently dropped.
 *
 * Usage: node validate.js OBJECTS.json
 *   OBJECTS.json is a JSON array of objects (the test converts kustomize's
 *   YAML output). Prints a JSON report {"objects": [{"index", "apiVersion",
 *   "kind", "name", "errors": [...]}], "unsupported": [...]} on stdout; the
 *   exit status is 0 only when every object is of a supported kind and has
 *   no error.
 * Kinds come from kubernetes-models (core and apps/batch/policy...) and
 * @kubernetes-models/prometheus-operator (monitoring.coreos.com); an object
 * of any other apiVersion/kind is reported as unsupported, never passed.
 */
"use strict";

const fs = require("fs");
const os = require("os");
const path = require("path");

const HERE = __dirname;

/* Module (without extension) of an apiVersion/kind, relative to
 * node_modules; null when no package models it. */
function modelModule(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" ||
      !/^[A-Za-z0-9]+$/.test(kind))
    return null;
  let mod;
  if (apiVersion.startsWith("monitoring.coreos.com/"))
    mod = "@kubernetes-models/prometheus-operator/" + apiVersion + "/" + kind;
  else if (/^([a-z0-9.-]+\/)?v[0-9]+((alpha|beta)[0-9]+)?$/.test(apiVersion))
    mod = "kubernetes-models/" + apiVersion + "/" + kind;
  else
    return null;
  try {
    require.resolve(path.join(HERE, "node_modules", mod + ".js"));
  } catch (e) {
    return null;
  }
  return mod;
}

function schemaErrors(mod, obj) {
  const exports = require(path.join(HERE, "node_modules", mod + ".js"));
  const Model = exports[obj.kind];
  if (typeof Model !== "function")
    return ["no model class " + obj.kind + " in " + mod];
  try {
    new Model(obj).validate();
    return [];
  } catch (e) {
    const details = Array.isArray(e.errors)
      ? e.errors.map((x) => (x.instancePath || "/") + " " + x.message +
          (x.params ? " " + JSON.stringify(x.params) : ""))
      : [String(e.message || e)];
    return details.map((d) => "schema: " + d);
  }
}

/* One tsc run over all objects; returns a map index -> [errors]. */
function strictErrors(items) {
  const ts = require(path.join(HERE, "node_modules", "typescript"));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "shardcast-k8s-validate-"));
  const file = path.join(dir, "objects.ts");
  const lines = [];
  const lineOf = []; // [first line, last line, index]
  items.forEach(({ index, mod, obj }, n) => {
    lines.push("import type { I" + obj.kind + " as T" + n + " } from " +
      JSON.stringify(path.join(HERE, "node_modules", mod)) + ";");
  });
  items.forEach(({ index, obj }, n) => {
    const text = "export const o" + n + ": T" + n + " = " +
      JSON.stringify(obj, null, 1) + ";";
    const first = lines.length;
    lines.push(...text.split("\n"));
    lineOf.push([first, lines.length - 1, index]);
  });
  fs.writeFileSync(file, lines.join("\n") + "\n");
  const program = ts.createProgram([file], {
    noEmit: true, strict: true, skipLibCheck: true, types: [],
    moduleResolution: ts.ModuleResolutionKind.Node10,
    module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2020,
  });
  const out = new Map();
  const diags = ts.getPreEmitDiagnostics(program);
  for (const d of diags) {
    const msg = ts.flattenDiagnosticMessageText(d.messageText, "\n");
    let index = -1, where = "";
    if (d.file && d.file.fileName === file && d.start !== undefined) {
      const pos = d.file.getLineAndCharacterOfPosition(d.start);
      const hit = lineOf.find(([a, b]) => pos.line >= a && pos.line <= b);
      if (hit) index = hit[2];
      where = lines[pos.line].trim().slice(0, 120);
    }
    if (!out.has(index)) out.set(index, []);
    out.get(index).push("strict: " + msg.split("\n")[0] + (where ? " at `" + where + "`" : ""));
  }
  fs.rmSync(dir, { recursive: true, force: true });
  return out;
}

function main() {
  if (process.argv.length !== 3) {
    process.stderr.write("usage: node validate.js OBJECTS.json\n");
    return 2;
  }
  const objects = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  if (!Array.isArray(objects)) {
    process.stderr.write("validate.js: expected a JSON array of objects\n");
    return 2;
  }
  const report = { objects: [], unsupported: [] };
  const items = [];
  objects.forEach((obj, index) => {
    const meta = (obj && obj.metadata) || {};
    const mod = obj && modelModule(obj.apiVersion, obj.kind);
    const entry = { index, apiVersion: obj && obj.apiVersion, kind: obj && obj.kind,
                    name: meta.name, errors: [] };
    report.objects.push(entry);
    if (!mod) {
      report.unsupported.push(entry.apiVersion + "/" + entry.kind);
      entry.errors.push("unsupported apiVersion/kind");
      return;
    }
    entry.errors.push(...schemaErrors(mod, obj));
    items.push({ index, mod, obj });
  });
  if (items.length) {
    const strict = strictErrors(items);
    for (const [index, errs] of strict) {
      if (index < 0) {
        report.objects.push({ index: -1, kind: "(tsc)", errors: errs });
      } else {
        report.objects[index].errors.push(...errs);
      }
    }
  }
  process.stdout.write(JSON.stringify(report, null, 1) + "\n");
  return report.objects.every((o) => o.errors.length === 0) ? 0 : 1;
}

process.exitCode = main();
