// The official E2B JS SDK, unmodified, against aenv: configured only by E2B_API_KEY,
// E2B_API_URL and E2B_SANDBOX_URL (set by the pytest driver, tests/conformance/test_js_sdk.py).
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'

import {
  CommandExitError,
  FileNotFoundError,
  Sandbox,
  SandboxNotFoundError,
} from 'e2b'

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL']) {
  assert.ok(process.env[name], `${name} must be set`)
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

describe('sandbox', () => {
  let sbx
  before(async () => {
    sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { js: 'yes' }, envs: { JSV: 'from-create' } })
  })
  after(async () => {
    await sbx?.kill()
  })

  test('info, list, timeout, metrics, running', async () => {
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.state, 'running')
    assert.deepEqual(info.metadata, { js: 'yes' })
    const page = await Sandbox.list({ query: { metadata: { js: 'yes' }, state: ['running'] } }).nextItems()
    assert.ok(page.some((s) => s.sandboxId === sbx.sandboxId))
    await sbx.setTimeout(200_000)
    const end = (await sbx.getInfo()).endAt.getTime()
    assert.ok(Math.abs(end - Date.now() - 200_000) < 15_000)
    const [metric] = await sbx.getMetrics()
    assert.ok(metric.memUsed > 0 && metric.memUsed < metric.memTotal)
    assert.ok(await sbx.isRunning())
    await assert.rejects(Sandbox.getInfo('nosuchsandbox0000000'), SandboxNotFoundError)
  })

  test('commands: run, env, user, exit codes', async () => {
    const result = await sbx.commands.run('echo $JSV; whoami; echo err 1>&2')
    assert.equal(result.stdout, 'from-create\nuser\n')
    assert.equal(result.stderr, 'err\n')
    assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
    assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
    await assert.rejects(sbx.commands.run('exit 4'), (err) => err instanceof CommandExitError && err.exitCode === 4)
  })

  test('commands: callbacks, background, stdin, list, kill, connect', async () => {
    const chunks = []
    await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.1; done', { onStdout: (d) => chunks.push(d) })
    assert.equal(chunks.join(''), '1\n2\n3\n')
    const cat = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(cat.pid, 'to cat\n')
    await sbx.commands.closeStdin(cat.pid)
    assert.equal((await cat.wait()).stdout, 'to cat\n')
    const sleeper = await sbx.commands.run('sleep 300', { background: true })
    assert.ok((await sbx.commands.list()).some((p) => p.pid === sleeper.pid))
    assert.equal(await sbx.commands.kill(sleeper.pid), true)
    await assert.rejects(sleeper.wait(), CommandExitError)
    const late = await sbx.commands.run('sleep 2; echo late', { background: true })
    await late.disconnect()
    const again = await sbx.commands.connect(late.pid)
    assert.equal((await again.wait()).stdout, 'late\n')
  })

  test('pty: tty, input, resize', async () => {
    let output = ''
    const decoder = new TextDecoder()
    const pty = await sbx.pty.create({ rows: 24, cols: 80, onData: (d) => { output += decoder.decode(d) } })
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('tty; stty size\n'))
    for (let i = 0; i < 100 && !output.includes('24 80'); i++) await sleep(100)
    await sbx.pty.resize(pty.pid, { rows: 33, cols: 99 })
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; exit\n'))
    await pty.wait()
    assert.match(output, /\/dev\/pts\/\d+/)
    assert.ok(output.includes('24 80') && output.includes('33 99'), output)
  })

  test('files: write, read, list, info, rename, remove, watch', async () => {
    const root = `/home/user/js-${Date.now()}`
    const events = []
    await sbx.files.makeDir(root)
    const watcher = await sbx.files.watchDir(root, (e) => events.push(`${e.type}:${e.name}`), { recursive: true })
    const info = await sbx.files.write(`${root}/a.txt`, 'alpha')
    assert.equal(info.path, `${root}/a.txt`)
    await sbx.files.write([{ path: `${root}/b.bin`, data: new Uint8Array([1, 2, 3]).buffer }])
    assert.equal(await sbx.files.read(`${root}/a.txt`), 'alpha')
    assert.deepEqual([...(await sbx.files.read(`${root}/b.bin`, { format: 'bytes' }))], [1, 2, 3])
    assert.deepEqual((await sbx.files.list(root)).map((e) => e.name).sort(), ['a.txt', 'b.bin'])
    const stat = await sbx.files.getInfo(`${root}/a.txt`)
    assert.equal(stat.size, 5)
    assert.equal(stat.owner, 'user')
    await sbx.files.rename(`${root}/a.txt`, `${root}/c.txt`)
    await sbx.files.remove(`${root}/c.txt`)
    assert.equal(await sbx.files.exists(`${root}/c.txt`), false)
    assert.equal(await sbx.files.makeDir(root), false)
    await assert.rejects(sbx.files.read(`${root}/missing`), FileNotFoundError)
    for (let i = 0; i < 100 && !events.includes('remove:c.txt'); i++) await sleep(100)
    await watcher.stop()
    for (const wanted of ['write:a.txt', 'rename:a.txt', 'remove:c.txt']) {
      assert.ok(events.includes(wanted), `${wanted} not in ${events}`)
    }
  })

  test('files: the default user writes into a new folder under / and owns what was made', async () => {
    // As E2B's envd: written as root whoever asks, the file and the folders made given to the
    // caller, the folders that existed left alone (the official suite's write into /, Harbor).
    const top = `/js-files-${Date.now()}`
    try {
      const info = await sbx.files.write(`${top}/solution/solve.sh`, 'echo ok\n')
      assert.equal(info.path, `${top}/solution/solve.sh`)
      for (const path of [top, `${top}/solution`, `${top}/solution/solve.sh`]) {
        const entry = await sbx.files.getInfo(path)
        assert.deepEqual([entry.owner, entry.group], ['user', 'user'], path)
      }
      assert.equal((await sbx.files.getInfo(`${top}/solution/solve.sh`)).permissions, '-rw-r--r--')
      assert.equal((await sbx.files.getInfo('/')).owner, 'root')
      assert.equal((await sbx.commands.run(`sh ${top}/solution/solve.sh`)).stdout, 'ok\n')
      await sbx.files.write('/root/js-from-user.txt', 'u')
      const owners = await sbx.commands.run('stat -c %U /root/js-from-user.txt /root', { user: 'root' })
      assert.equal(owners.stdout, 'user\nroot\n')
      assert.equal(await sbx.files.makeDir(`${top}/made/deep`), true)
      assert.equal((await sbx.files.getInfo(`${top}/made`)).owner, 'user')
    } finally {
      await sbx.files.remove(top)
      await sbx.files.remove('/root/js-from-user.txt')
    }
    assert.equal(await sbx.files.exists(top), false)
  })

  test('getHost names the port under the configured domain', () => {
    const host = sbx.getHost(8080)
    assert.ok(host.startsWith(`8080-${sbx.sandboxId}.`), host)
  })
})

test('kill, connect and calls on a killed sandbox', async () => {
  const sbx = await Sandbox.create()
  const other = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await other.commands.run('echo via-connect')).stdout, 'via-connect\n')
  assert.equal(await Sandbox.kill(sbx.sandboxId), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  assert.equal(await other.isRunning(), false)
  const started = Date.now()
  // The JS SDK turns the gateway's 502 "was not found" into SandboxNotFoundError.
  await assert.rejects(other.commands.run('echo never'), SandboxNotFoundError)
  assert.ok(Date.now() - started < 10_000)
})
