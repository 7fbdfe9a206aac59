// The official E2B JS SDK's Volume API and volumeMounts, unmodified, against aenv (run by
// test_js_sdk.py with the platform's e2b.env, E2B_VOLUME_API_URL included).
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { test } from 'node:test'

import { Sandbox, Volume, VolumeError } from 'e2b'

async function text(stream) {
  const chunks = []
  for await (const chunk of stream) chunks.push(Buffer.from(chunk))
  return Buffer.concat(chunks).toString()
}

test('volumes: content calls, a mount in a sandbox, destroy', async () => {
  const name = `js-vol-${randomBytes(4).toString('hex')}`
  const vol = await Volume.create(name)
  let sbx
  try {
    assert.match(vol.volumeId, /^vol-/)
    assert.equal(vol.name, name)
    assert.equal((await Volume.getInfo(vol.volumeId)).name, name)
    assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId))
    await assert.rejects(Volume.create(name), (err) => err instanceof VolumeError && /409/.test(err.message))

    await vol.makeDir('/in/deep', { force: true })
    const written = await vol.writeFile('/in/deep/hello.txt', 'from js')
    assert.equal(written.size, 7)
    assert.equal(await vol.readFile('/in/deep/hello.txt'), 'from js')
    assert.equal(await text(await vol.readFile('/in/deep/hello.txt', { format: 'stream' })), 'from js')
    assert.deepEqual((await vol.list('/in/deep')).map((e) => e.name), ['hello.txt'])
    const updated = await vol.updateMetadata('/in/deep/hello.txt', { mode: 0o600 })
    assert.equal(updated.mode & 0o777, 0o600)
    assert.equal(await vol.exists('/in/deep/hello.txt'), true)
    assert.equal(await vol.exists('/in/none'), false)

    sbx = await Sandbox.create({ timeoutMs: 300_000, volumeMounts: { '/data': vol } })
    assert.deepEqual((await sbx.getInfo()).volumeMounts, [{ name, path: '/data' }])
    const seen = await sbx.commands.run('cat /data/in/deep/hello.txt', { user: 'root' })
    assert.equal(seen.stdout, 'from js')
    await sbx.commands.run('echo -n from-guest > /data/guest.txt')
    assert.equal(await vol.readFile('/guest.txt'), 'from-guest')

    await vol.remove('/in')
    assert.equal(await vol.exists('/in'), false)
    // Mounted by a running sandbox: refused, the volume kept.
    await assert.rejects(Volume.destroy(vol.volumeId), (err) => /409/.test(err.message))
  } finally {
    await sbx?.kill()
  }
  assert.equal(await Volume.destroy(vol.volumeId), true)
  assert.equal(await Volume.destroy(vol.volumeId), false)
})
