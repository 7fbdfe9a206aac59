// The official E2B JS SDK's Secret API, unmodified, against aenv (run by test_js_sdk.py).
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { test } from 'node:test'

import { Secret, SecretError, SecretNotFoundError } from 'e2b'

test('secrets: create, update, getInfo, list, exists, destroy', async () => {
  const name = `js-${randomBytes(4).toString('hex')}`
  const created = await Secret.create(name.toUpperCase(), 'js-value-1', { metadata: { sdk: 'js' } })
  try {
    assert.match(created.secretId, /^sec_/)
    assert.equal(created.name, name)
    assert.equal(created.version, 1)
    assert.deepEqual(created.metadata, { sdk: 'js' })
    const updated = await Secret.update(name, 'js-value-2')
    assert.equal(updated.version, 2)
    assert.equal((await Secret.getInfo(created.secretId)).version, 2)
    assert.equal(await Secret.exists(name), true)
    await assert.rejects(Secret.create(name, 'again'), (err) => err instanceof SecretError && /409/.test(err.message))
    await assert.rejects(Secret.getInfo(`${name}-none`), SecretNotFoundError)

    const paginator = Secret.list({ limit: 1 })
    const seen = []
    while (paginator.hasNext) {
      const page = await paginator.nextItems()
      assert.ok(page.length <= 1)
      seen.push(...page.map((s) => s.name))
    }
    assert.ok(seen.includes(name))
  } finally {
    assert.equal(await Secret.destroy(created.secretId), true)
  }
  assert.equal(await Secret.exists(name), false)
  assert.equal(await Secret.destroy(name), false)
})
