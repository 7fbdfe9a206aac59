// A JavaScript context: one Node.js process, driven by the code interpreter server (node.py).
// Requests come as JSON lines on the socket whose fd is argv[2] ({id, code}); for each, the
// reply lines there are an optional {id, type: "result", text} or {id, type: "error", name,
// value, traceback}, then {id, type: "done"} once a marker has been written to stdout and
// stderr after the cell's own output, so the server knows both streams have everything the
// cell printed.
// A cell without `await` runs as a script in the global context (its declarations stay for later
// cells; SIGINT breaks a busy loop). One with top-level `await` goes through Node's REPL, which
// rewrites it to run asynchronously and keep its declarations; SIGINT ends its waiting. Static
// imports are rewritten into dynamic ones first.
import domain from 'node:domain';
import net from 'node:net';
import readline from 'node:readline';
import repl from 'node:repl';
import util from 'node:util';
import vm from 'node:vm';
import { PassThrough } from 'node:stream';

const MARK = '\u001e';
const channel = new net.Socket({ fd: Number(process.argv[2]), readable: true, writable: true });
let pending = null; // the running cell's reject: a SIGINT ends an awaited cell too
// The REPL reports a cell's exceptions (thrown or awaited) on its domain, not to the eval's
// callback: ours hands them to the running cell.
const cells = domain.create();
cells.on('error', (err) => { if (pending) pending(err); });
const output = new PassThrough();
output.resume(); // the REPL's own echo of results and errors: the socket's replies carry them
const server = repl.start({
  input: new PassThrough(), output, prompt: '', terminal: false, domain: cells,
  useGlobal: true, ignoreUndefined: true, preview: false,
});
const AWAIT = /\bawait\b/;

process.on('SIGINT', () => {
  if (pending) pending(Object.assign(new Error('Execution interrupted'), { name: 'KeyboardInterrupt' }));
});

// A static import at the start of a line (the rest of the line is kept).
const IMPORT = /^\s*import\s+(?:([\w$]+)\s*,?\s*)?(?:\*\s+as\s+([\w$]+)|\{([^}]*)\})?\s*(?:from\s+)?(['"][^'"]+['"])\s*;?/;

function rewriteImports(code) {
  return code.split('\n').map((line) => {
    const match = line.match(IMPORT);
    if (!match) return line;
    const [, name, namespace, names, source] = match;
    const module = `(await import(${source}))`;
    const rest = line.slice(match[0].length);
    const parts = [];
    if (!name && !namespace && !names) return `await import(${source});${rest}`;
    if (namespace) parts.push(`var ${namespace} = ${module};`);
    if (name) parts.push(`var ${name} = ${module}.default;`);
    if (names) {
      const fields = names.split(',').map((n) => n.trim()).filter(Boolean)
        .map((n) => n.replace(/\s+as\s+/, ': '));
      parts.push(`var { ${fields.join(', ')} } = ${module};`);
    }
    return parts.join(' ') + rest;
  }).join('\n');
}

function evaluate(code) {
  const source = rewriteImports(code);
  return new Promise((resolve, reject) => {
    pending = reject;
    if (!AWAIT.test(source)) {
      resolve(vm.runInThisContext(source, { filename: 'cell.js', breakOnSigint: true }));
      return;
    }
    server.eval(source, server.context, 'cell.js', (err, value) => {
      if (err) reject(err); else resolve(value);
    });
  });
}

function send(message) {
  channel.write(JSON.stringify(message) + '\n');
}

function describe(value) {
  return typeof value === 'string' ? value : util.inspect(value, { depth: 4 });
}

async function run(id, code) {
  try {
    const value = await evaluate(code);
    if (value !== undefined) send({ id, type: 'result', text: describe(value) });
  } catch (err) {
    const error = err instanceof Error ? err : new Error(describe(err));
    send({ id, type: 'error', name: error.name, value: error.message, traceback: error.stack || '' });
  } finally {
    pending = null;
  }
  process.stdout.write(`${MARK}${id}\n`, () => {
    process.stderr.write(`${MARK}${id}\n`, () => send({ id, type: 'done' }));
  });
}

// One cell at a time: the server sends the next only after this one's "done".
readline.createInterface({ input: channel }).on('line', (line) => {
  const { id, code } = JSON.parse(line);
  run(id, code);
});
channel.on('close', () => process.exit(0));
