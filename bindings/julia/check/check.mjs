// check.mjs — Julia source checks that need no Julia, using tree-sitter-julia.
//
//   node check.mjs syntax FILE.jl...   "FILE: ok (N nodes)" each; exit 1 if any file has an
//                                      ERROR or MISSING node (printed as FILE:LINE:COL)
//   node check.mjs ccalls FILE.jl...   JSON on stdout: every @ccall/ccall with its symbol,
//                                      argument types and return type; exit 1 on a call
//                                      whose form is not recognized (so none is skipped)
//   node check.mjs decls FILE.jl...    JSON on stdout: every top-level `const NAME = value`
//                                      (value as text) and every struct's fields in order
//
// check_ccalls.py compares the ccalls output with abi/flashbwd.h and the built library;
// test_ctypes.py compares the decls output with the header and the library.
import { Parser, Language, Query } from 'web-tree-sitter';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import v8 from 'node:v8';

// V8's optimizing tier spends seconds of CPU on the 6 MB grammar, and the process waits for
// it at exit; the baseline compiler alone parses our files in milliseconds.
v8.setFlagsFromString('--liftoff-only');

const require = createRequire(import.meta.url);
await Parser.init();
const Julia = await Language.load(require.resolve('tree-sitter-julia/tree-sitter-julia.wasm'));
const parser = new Parser();
parser.setLanguage(Julia);

const [mode, ...files] = process.argv.slice(2);
if (!['syntax', 'ccalls', 'decls'].includes(mode) || files.length === 0) {
  console.error('usage: node check.mjs syntax|ccalls|decls FILE.jl...');
  process.exit(2);
}

const parse = (file) => parser.parse(readFileSync(file, 'utf8'));
const where = (file, node) => `${file}:${node.startPosition.row + 1}:${node.startPosition.column + 1}`;
const compact = (node) => node.text.replace(/\s+/g, '');

function syntaxErrors(root) {
  const errors = [];
  const walk = (node) => {
    if (node.isError || node.isMissing) errors.push(node);
    else if (node.hasError) for (const child of node.children) walk(child);
  };
  walk(root);
  return errors;
}

// `@ccall lib.sym(a::T, ...)::R`
const macroQuery = new Query(Julia, `
  (macrocall_expression
    (macro_identifier (identifier) @macro)
    (macro_argument_list
      (typed_expression
        (call_expression
          (field_expression (identifier) @lib (identifier) @sym)
          (argument_list) @args)
        (_) @ret))
    (#eq? @macro "ccall")) @call`);

// `ccall((:sym, lib), R, (T, ...), args...)`
const callQuery = new Query(Julia, `
  (call_expression
    (identifier) @fn
    (argument_list
      . (tuple_expression . (quote_expression (identifier) @sym) . (identifier) @lib .)
      . (_) @ret
      . (tuple_expression) @types)
    (#eq? @fn "ccall")) @call`);

// Every ccall-looking node, to prove that the two patterns above saw all of them.
const anyQuery = new Query(Julia, `
  [(macrocall_expression (macro_identifier (identifier) @name))
   (call_expression (identifier) @name)] @node`);

// Returns { calls, problems }; a problem is a ccall this check cannot read completely.
function ccallsOf(file, root) {
  const calls = [];
  const problems = [];
  const seen = new Set();
  for (const m of macroQuery.matches(root)) {
    const c = Object.fromEntries(m.captures.map((x) => [x.name, x.node]));
    seen.add(c.call.id);
    const untyped = c.args.namedChildren.filter((a) => a.type !== 'typed_expression' || a.namedChildCount !== 2);
    for (const a of untyped) problems.push(`${where(file, a)}: @ccall argument without ::Type: ${a.text}`);
    if (untyped.length) continue;
    const args = c.args.namedChildren.map((a) => ({ name: compact(a.namedChildren[0]), type: compact(a.namedChildren[1]) }));
    calls.push({ file, line: c.call.startPosition.row + 1, form: '@ccall', symbol: c.sym.text,
                 library: c.lib.text, args, ret: compact(c.ret) });
  }
  for (const m of callQuery.matches(root)) {
    const c = Object.fromEntries(m.captures.map((x) => [x.name, x.node]));
    seen.add(c.call.id);
    const types = c.types.namedChildren.map(compact);
    const values = c.call.namedChildren[1].namedChildren.slice(3);
    if (values.length !== types.length) {
      problems.push(`${where(file, c.call)}: ccall with ${types.length} types but ${values.length} values`);
      continue;
    }
    calls.push({ file, line: c.call.startPosition.row + 1, form: 'ccall', symbol: c.sym.text,
                 library: c.lib.text,
                 args: types.map((type, i) => ({ name: compact(values[i]), type })),
                 ret: compact(c.ret) });
  }
  for (const m of anyQuery.matches(root)) {
    const c = Object.fromEntries(m.captures.map((x) => [x.name, x.node]));
    if (c.name.text === 'ccall' && !seen.has(c.node.id))
      problems.push(`${where(file, c.node)}: ccall in a form this check does not read: ${c.node.text.split('\n')[0]}`);
  }
  return { calls, problems };
}

const constQuery = new Query(Julia, `
  (const_statement (assignment . (identifier) @name . (operator) . (_) @value .))`);
const structQuery = new Query(Julia, `(struct_definition (type_head (identifier) @name)) @struct`);

function declsOf(file, root, out, problems) {
  for (const m of constQuery.matches(root)) {
    const c = Object.fromEntries(m.captures.map((x) => [x.name, x.node]));
    if (c.name.text in out.consts) problems.push(`${where(file, c.name)}: ${c.name.text} defined twice`);
    out.consts[c.name.text] = c.value.text.replace(/\s+/g, ' ');
  }
  for (const m of structQuery.matches(root)) {
    const c = Object.fromEntries(m.captures.map((x) => [x.name, x.node]));
    const fields = [];
    for (const f of c.struct.namedChildren.slice(1)) {
      if (f.type === 'typed_expression' && f.namedChildren[0].type === 'identifier')
        fields.push([f.namedChildren[0].text, compact(f.namedChildren[1])]);
      else if (f.type === 'identifier')
        problems.push(`${where(file, f)}: untyped field ${f.text} in struct ${c.name.text}`);
      // anything else is a constructor or a docstring, not a field
    }
    out.structs[c.name.text] = fields;
  }
}

let failed = false;
const allCalls = [];
const decls = { consts: {}, structs: {} };
for (const file of files) {
  const tree = parse(file);
  if (mode === 'syntax') {
    const errors = syntaxErrors(tree.rootNode);
    for (const node of errors)
      console.log(`${where(file, node)}: syntax error${node.isMissing ? ` (missing ${node.type})` : ''}`);
    if (errors.length) failed = true;
    else console.log(`${file}: ok (${tree.rootNode.descendantCount} nodes)`);
  } else if (mode === 'decls') {
    const problems = [];
    declsOf(file, tree.rootNode, decls, problems);
    for (const p of problems) console.error(p);
    if (problems.length) failed = true;
  } else {
    if (tree.rootNode.hasError) {
      console.error(`${file}: does not parse; run the syntax check`);
      failed = true;
      continue;
    }
    const { calls, problems } = ccallsOf(file, tree.rootNode);
    allCalls.push(...calls);
    for (const p of problems) console.error(p);
    if (problems.length) failed = true;
  }
}
if (mode === 'ccalls') console.log(JSON.stringify(allCalls, null, 1));
if (mode === 'decls') console.log(JSON.stringify(decls, null, 1));
process.exit(failed ? 1 : 0);
