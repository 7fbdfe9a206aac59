// The official E2B JS SDK's template builder, unmodified, against aenv: an image from the
// registry the pytest driver started (AENV_TEST_IMAGE), a RUN as root, a start command and its
// ready check; a sandbox of it answers at once; its tags assigned, listed and removed; the built-in
// `base` seen as E2B's public template; a background build polled to its end; a failing step
// rejects with BuildError naming it.
import assert from 'node:assert/strict'

import { BuildError, Sandbox, Template } from 'e2b'

const image = process.env.AENV_TEST_IMAGE
assert.ok(image, 'AENV_TEST_IMAGE must be set')
const app = 'wget -q -O- http://127.0.0.1:8000/index.html'

const template = Template()
  .fromImage(image)
  .runCmd('mkdir -p /www && echo from js > /www/index.html', { user: 'root' })
  .setStartCmd('busybox httpd -f -p 8000 -h /www', app)
const lines = []
const info = await Template.build(template, 'e2e-js', {
  memoryMB: 512,
  onBuildLogs: (entry) => lines.push(entry.message),
})
assert.ok(info.buildId && info.templateId)
assert.ok(lines.some((line) => line.includes('RUN mkdir -p /www')), lines.join('\n'))

assert.equal(await Template.exists('base'), true)
assert.deepEqual((await Template.getTags('base')).map((t) => t.tag), ['default'])
assert.equal(await Template.exists('e2e-js-never-built'), false)
const tagged = await Template.assignTags('e2e-js:default', ['stable'])
assert.equal(tagged.buildId, info.buildId)
assert.ok(await Template.exists('e2e-js:stable'))
assert.deepEqual((await Template.getTags('e2e-js')).map((t) => t.tag).sort(), ['default', 'stable'])
await Template.removeTags('e2e-js', 'stable')
assert.equal(await Template.exists('e2e-js:stable'), false)

// Equal inputs: the background build reuses the one above, and its status says so.
const background = await Template.buildInBackground(template, 'e2e-js-bg', { memoryMB: 512 })
let status = await Template.getBuildStatus(background)
for (let i = 0; i < 600 && ['waiting', 'building'].includes(status.status); i++) {
  await new Promise((resolve) => setTimeout(resolve, 500))
  status = await Template.getBuildStatus(background)
}
assert.equal(status.status, 'ready', JSON.stringify(status))

const sbx = await Sandbox.create('e2e-js', { timeoutMs: 300_000 })
try {
  const served = await sbx.commands.run(app)
  assert.equal(served.stdout, 'from js\n')
} finally {
  await sbx.kill()
}

await assert.rejects(
  Template.build(Template().fromImage(image).runCmd('exit 4'), 'e2e-js-broken', { memoryMB: 512 }),
  (err) => err instanceof BuildError && /step 1 \(RUN\): exited with code 4/.test(err.message),
)
console.log('template build: ok')
