"""E2B template code, unchanged, against the whole platform: `AsyncTemplate.build` of an image
pushed to a real registry (Debian's docker-registry on loopback) with a COPY of a local context
(also a glob with symlinks, as E2B's own suite copies), a RUN, ENV and a start command with its
ready check; sandboxes of the alias start with the app already answering, the ENV gone as E2B's
`set_envs` is for the build only; a template built on it (`from_template`); a failing step
reported with its step and the previous version kept; a tag pushed again built anew; the
built-in templates as E2B's public ones; the catalog and builds kept in the real etcd."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
import pytest_asyncio
from e2b import AsyncSandbox, AsyncTemplate, BuildException, TemplateClass
from e2b.template.logger import LogEntry

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_cli.platform import Platform
from aenv_cli.ports import address
from aenv_common.snapshots import snapstore_stub
from aenv_testing.oci_layouts import busybox_layout, marker_layout, sh
from aenv_testing.registry import Registry, bcrypt_hash, docker_registry, push

from ..conftest import shared_cache_dir
from .conftest import another_node_agent, until

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.registry, pytest.mark.asyncio(loop_scope="session")]

APP = "wget -q -O- http://127.0.0.1:8000/index.html"
REPO = Path(__file__).resolve().parents[2]
JS_BUILD = Path(__file__).parent / "js" / "template_build.mjs"


@pytest_asyncio.fixture(loop_scope="session")
async def image(tmp_path: Path) -> AsyncIterator[tuple[Registry, str]]:
    """A busybox-only image (no bash, no Python, no libc) in a registry of its own."""
    layout = busybox_layout(tmp_path / "layout")
    async with docker_registry(tmp_path / "registry") as registry:
        await push(f"oci:{layout}:1", registry, "e2e/busybox:1")
        yield registry, f"{registry.host}/e2e/busybox:1"


def _context(tmp_path: Path) -> Path:
    context = tmp_path / "context"
    (context / "www").mkdir(parents=True)
    (context / "www" / "index.html").write_text("from the context\n")
    # As E2B's template suite: a folder with relative, absolute and dangling symlinks.
    folder = context / "folder"
    folder.mkdir()
    (folder / "test.txt").write_text("This is a test file.")
    (folder / "symlink.txt").symlink_to("test.txt")
    (folder / "symlink2.txt").symlink_to(folder / "test.txt")
    (folder / "symlink3.txt").symlink_to("12345test.txt")
    return context


async def test_existing_template_code_builds_and_runs_unchanged(
    platform: Platform, sdk_env: None, image: tuple[Registry, str], tmp_path: Path,
) -> None:
    _, reference = image
    context = _context(tmp_path)
    template = (
        AsyncTemplate(file_context_path=context)
        .from_image(reference)
        .copy("www", "/www")
        .copy("folder/*", "folder", force_upload=True)
        .run_cmd("busybox cat folder/symlink.txt")
        .run_cmd("echo built > /www/built.txt", user="root")
        .set_envs({"GREETING": "hello"})
        .set_start_cmd('echo "$GREETING" > started.txt && busybox httpd -f -p 8000 -h /www',
                       APP)
    )
    lines: list[LogEntry] = []
    info = await AsyncTemplate.build(template, "e2e-web", memory_mb=512,
                                     on_build_logs=lines.append)
    assert any("RUN echo built" in entry.message for entry in lines)
    assert await AsyncTemplate.exists("e2e-web")

    sandbox = await AsyncSandbox.create("e2e-web", timeout=300)
    try:
        # The start command's server was captured running: it answers at once.
        assert (await sandbox.commands.run(APP)).stdout == "from the context\n"
        assert (await sandbox.commands.run("busybox cat /www/built.txt")).stdout == "built\n"
        # set_envs held for the build (its start command saw it), not for later commands.
        assert (await sandbox.commands.run("busybox cat started.txt")).stdout == "hello\n"
        assert (await sandbox.commands.run('echo "[$GREETING]"')).stdout == "[]\n"
        # The glob's matches, the symlinks as they were.
        links = await sandbox.commands.run(
            "busybox cat folder/symlink.txt; echo; busybox ls folder; cd folder && "
            "for link in symlink.txt symlink2.txt symlink3.txt; do busybox readlink $link; done")
        assert links.stdout == (
            "This is a test file.\nsymlink.txt\nsymlink2.txt\nsymlink3.txt\ntest.txt\n"
            f"test.txt\n{context / 'folder' / 'test.txt'}\n12345test.txt\n")
        assert (await sandbox.commands.run("busybox whoami")).stdout == "user\n"
        # As E2B answers: the template's id (not its build's), the name it was created by.
        got = await sandbox.get_info()
        assert (got.template_id, got.name) == (info.template_id, "e2e-web")
        assert (await sandbox.commands.run("echo $E2B_TEMPLATE_ID")).stdout == (
            f"{info.template_id}\n")
    finally:
        await sandbox.kill()

    child = AsyncTemplate().from_template("e2e-web").run_cmd(
        "echo child > /www/child.html", user="root")
    await AsyncTemplate.build(child, "e2e-web-child", memory_mb=512)
    sandbox = await AsyncSandbox.create("e2e-web-child", timeout=300)
    try:
        both = await sandbox.commands.run(APP + " http://127.0.0.1:8000/child.html")
        assert both.stdout == "from the context\nchild\n"
    finally:
        await sandbox.kill()

    # A failing rebuild names its step; the alias keeps creating the version that worked.
    broken = AsyncTemplate().from_image(reference).run_cmd("exit 3")
    with pytest.raises(BuildException, match=r"step 1 \(RUN\): exited with code 3"):
        await AsyncTemplate.build(broken, "e2e-web", memory_mb=512)
    sandbox = await AsyncSandbox.create("e2e-web", timeout=300)
    try:
        assert (await sandbox.commands.run(APP)).stdout == "from the context\n"
        assert sandbox.sandbox_id
    finally:
        await sandbox.kill()

    tags = {t.tag: t.build_id for t in await AsyncTemplate.get_tags("e2e-web")}
    assert tags == {"default": info.build_id}


async def test_a_command_as_a_user_the_image_lacks_fails_in_e2bs_words(
    platform: Platform, sdk_env: None, image: tuple[Registry, str],
) -> None:
    """E2B's template suite: `run_cmd("whoami", user="root123")`."""
    _, reference = image
    template = AsyncTemplate().from_image(reference).skip_cache().run_cmd(
        "whoami", user="root123")
    with pytest.raises(BuildException) as failed:
        await AsyncTemplate.build(template, "e2e-nouser", memory_mb=512)
    assert ("failed to run command 'whoami': command failed: unauthenticated: invalid "
            "username: 'root123'") in str(failed.value)


async def test_a_tag_pushed_again_is_built_anew(
    platform: Platform, sdk_env: None, image: tuple[Registry, str], tmp_path: Path,
) -> None:
    registry, _ = image
    reference = f"{registry.host}/e2e/retag:1"
    template = AsyncTemplate().from_image(reference)

    async def build() -> list[str]:
        lines: list[LogEntry] = []
        await AsyncTemplate.build(template, "e2e-retag", memory_mb=512,
                                  on_build_logs=lines.append)
        return [entry.message for entry in lines]

    await push(f"oci:{busybox_layout(tmp_path / 'one')}:1", registry, "e2e/retag:1")
    first = await build()
    again = await build()
    assert any("reusing the template of build" in m for m in again)  # unchanged: cached
    second = busybox_layout(tmp_path / "two")
    sh("umoci", "unpack", "--image", f"{second}:1", tmp_path / "two-bundle")
    (tmp_path / "two-bundle" / "rootfs" / "etc" / "release").write_text("two\n")
    sh("umoci", "repack", "--image", f"{second}:1", tmp_path / "two-bundle")
    await push(f"oci:{second}:1", registry, "e2e/retag:1")
    pushed = await build()
    assert not any("reusing the template" in m for m in pushed)
    assert any(m.startswith("base disk of") for m in pushed)  # pulled and built anew
    digests = [next(m for m in lines if m.startswith(f"{reference} is sha256:"))
               for lines in (first, again, pushed)]
    assert digests[0] == digests[1] != digests[2]
    sandbox = await AsyncSandbox.create("e2e-retag", timeout=120)
    try:  # the new content
        assert (await sandbox.commands.run("busybox cat /etc/release")).stdout == "two\n"
    finally:
        await sandbox.kill()


async def test_the_builtin_templates_are_e2bs_public_ones(
    platform: Platform, sdk_env: None,
) -> None:
    assert await AsyncTemplate.exists("base")
    assert [t.tag for t in await AsyncTemplate.get_tags("base")] == ["default"]
    headers = {"X-API-Key": os.environ["E2B_API_KEY"]}
    async with httpx.AsyncClient(base_url=os.environ["E2B_API_URL"], headers=headers) as http:
        defaults = (await http.get("/default-templates")).json()
        assert "base" in [t["templateID"] for t in defaults]
        assert all(t["public"] and t["isDefault"] for t in defaults)
        assert (await http.delete("/templates/base")).status_code == 403


async def test_an_unknown_image_fails_the_build_with_its_reason(
    platform: Platform, sdk_env: None, image: tuple[Registry, str],
) -> None:
    registry, _ = image
    missing = AsyncTemplate().from_image(f"{registry.host}/e2e/nosuch:1")
    with pytest.raises(BuildException, match=r"nosuch:1 not found"):
        await AsyncTemplate.build(missing, "e2e-missing", memory_mb=512)
    assert await AsyncTemplate.exists("e2e-missing")  # requested, but nothing to create
    with pytest.raises(Exception, match="no ready build"):
        await AsyncSandbox.create("e2e-missing", timeout=60)


async def _fails_at_the_pull(name: str, template: TemplateClass, reason: str,
                             min_free_disk_mb: int | None = None) -> None:
    """The build ends `error` with its one-line reason at the base step, and nothing of it is
    left on the node (no template directory of its build)."""
    with pytest.raises(BuildException, match=reason) as failed:
        await AsyncTemplate.build(template, name, memory_mb=512,
                                  min_free_disk_mb=min_free_disk_mb)
    assert "\n" not in str(failed.value)
    assert not (shared_cache_dir() / "templates" / await _latest_build(name)).exists()
    with pytest.raises(Exception, match="no ready build"):
        await AsyncSandbox.create(name, timeout=60)


async def _latest_build(name: str) -> str:
    headers = {"X-API-Key": os.environ["E2B_API_KEY"]}
    async with httpx.AsyncClient(base_url=os.environ["E2B_API_URL"], headers=headers) as http:
        template = (await http.get(f"/templates/aliases/{name}")).json()["templateID"]
        return str((await http.get(f"/templates/{template}")).json()["buildID"])


async def test_an_image_for_another_architecture_only_fails_the_build(
    platform: Platform, sdk_env: None, image: tuple[Registry, str], tmp_path: Path,
) -> None:
    registry, _ = image
    await push(f"oci:{marker_layout(tmp_path, 'arm64')}:1", registry, "e2e/arm64only:1")
    await _fails_at_the_pull(
        "e2e-arm64", AsyncTemplate().from_image(f"{registry.host}/e2e/arm64only:1"),
        r"has no linux/amd64 variant \(it has: linux/arm64\)")


async def test_a_corrupt_layer_fails_the_build_and_is_not_kept(
    platform: Platform, sdk_env: None, image: tuple[Registry, str], tmp_path: Path,
) -> None:
    registry, _ = image
    await push(f"oci:{marker_layout(tmp_path)}:1", registry, "e2e/corrupt:1")
    [layer] = await registry.layer_digests("e2e/corrupt", "1")
    registry.corrupt(layer)
    await _fails_at_the_pull(
        "e2e-corrupt", AsyncTemplate().from_image(f"{registry.host}/e2e/corrupt:1"),
        rf"layer {layer} is corrupt")
    blob = shared_cache_dir() / "images" / "blobs" / "sha256" / layer.split(":")[1]
    assert not blob.exists()


async def test_a_disk_past_the_nodes_limit_fails_the_build(
    platform: Platform, sdk_env: None, image: tuple[Registry, str],
) -> None:
    # The node's template_max_disk_mib (64 GiB by default) is less than the free room asked.
    _, reference = image
    await _fails_at_the_pull(
        "e2e-too-large", AsyncTemplate().from_image(reference),
        r"but a template's disk is at most \d+ MiB", min_free_disk_mb=100_000)


async def test_a_dockerfile_builds_through_the_sdk(
    platform: Platform, sdk_env: None, image: tuple[Registry, str], tmp_path: Path,
) -> None:
    _, reference = image
    context = _context(tmp_path)
    (context / "Dockerfile").write_text(
        f"FROM {reference}\nENV STAGE=docker\nARG FLAVOUR=plain\nWORKDIR /srv\n"
        "COPY www ./www\nRUN echo ran $STAGE $FLAVOUR > /srv/ran.txt\n")
    template = AsyncTemplate(file_context_path=context).from_dockerfile(
        str(context / "Dockerfile"))
    await AsyncTemplate.build(template, "e2e-dockerfile", memory_mb=512)
    sandbox = await AsyncSandbox.create("e2e-dockerfile", timeout=300)
    try:
        # WORKDIR stays the sandboxes' directory; the files COPY and RUN left are there; ENV
        # and ARG held for the RUN only.
        done = await sandbox.commands.run(
            'busybox pwd; busybox cat www/index.html ran.txt; echo "[$STAGE$FLAVOUR]"')
        assert done.stdout == "/srv\nfrom the context\nran docker plain\n[]\n"
    finally:
        await sandbox.kill()


async def test_images_of_a_registry_with_basic_auth_need_its_credentials(
    platform: Platform, sdk_env: None, tmp_path: Path,
) -> None:
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text(f"builder:{bcrypt_hash('s3cret')}\n")
    auth = {"htpasswd": {"realm": "e2e", "path": str(htpasswd)}}
    layout = busybox_layout(tmp_path / "layout")
    async with docker_registry(tmp_path / "registry", auth) as registry:
        await push(f"oci:{layout}:1", registry, "private/busybox:1", creds="builder:s3cret")
        reference = f"{registry.host}/private/busybox:1"
        wrong = AsyncTemplate().from_image(reference, username="builder", password="nope")
        with pytest.raises(BuildException, match=r"(?i)unauthorized|credentials|denied"):
            await AsyncTemplate.build(wrong, "e2e-private", memory_mb=512)
        right = AsyncTemplate().from_image(reference, username="builder", password="s3cret")
        await AsyncTemplate.build(right.run_cmd("echo ok > /ok", user="root"), "e2e-private",
                                  memory_mb=512)
    sandbox = await AsyncSandbox.create("e2e-private", timeout=300)
    try:
        assert (await sandbox.commands.run("busybox cat /ok")).stdout == "ok\n"
    finally:
        await sandbox.kill()


async def test_a_ready_command_that_never_succeeds_fails_the_build(
    platform: Platform, sdk_env: None, image: tuple[Registry, str],
) -> None:
    _, reference = image
    never = AsyncTemplate().from_image(reference).set_start_cmd("busybox sleep 600", "false")
    with pytest.raises(BuildException, match=r"ready command `false` did not succeed within"):
        await AsyncTemplate.build(never, "e2e-never-ready", memory_mb=512)


async def _in_snapstore(platform: Platform, build_id: str) -> bool:
    """Both manifests of the build's template: its inputs, and its captured snapshot."""
    async with grpc.aio.insecure_channel(address(platform.ports.snapstore)) as channel:
        listed = await snapstore_stub(channel).ListManifests(pb.ListManifestsRequest())
    names = set(listed.snapshot_ids)
    return f"template-{build_id}" in names and any(
        name.startswith(f"template-{build_id}-") for name in names)


async def _any_in_snapstore(platform: Platform, build_id: str) -> bool:
    async with grpc.aio.insecure_channel(address(platform.ports.snapstore)) as channel:
        listed = await snapstore_stub(channel).ListManifests(pb.ListManifestsRequest())
    return any(name.startswith(f"template-{build_id}") for name in listed.snapshot_ids)


async def test_a_template_built_on_one_node_is_created_on_another(
    platform: Platform, sdk_env: None, image: tuple[Registry, str], tmp_path: Path,
) -> None:
    _, reference = image
    template = (AsyncTemplate().from_image(reference)
                .run_cmd("mkdir -p /www && echo roaming > /www/index.html", user="root")
                .set_start_cmd("busybox httpd -f -p 8000 -h /www", APP))
    info = await AsyncTemplate.build(template, "e2e-roaming", memory_mb=512)
    await until(lambda: _in_snapstore(platform, info.build_id), 300, "the template in snapstore")

    # A node with templates of its own (it never saw this one); the building node goes away.
    async with another_node_agent(platform, tmp_path, "e2e-node-t",
                                  AENV_NODEAGENT_TEMPLATES_DIR=str(tmp_path / "templates-t")):
        async with platform.service_down("nodeagent"):
            sandbox = await AsyncSandbox.create("e2e-roaming", timeout=300)
            try:
                # Pulled with its captured snapshot: the start command's server answers at once.
                assert (await sandbox.commands.run(APP)).stdout == "roaming\n"
                detail = await AsyncSandbox.get_info(sandbox.sandbox_id)
                assert detail.name == "e2e-roaming"
            finally:
                await sandbox.kill()
    assert list((tmp_path / "templates-t" / info.build_id).iterdir())


async def test_a_deleted_template_leaves_snapstore_and_the_node(
    platform: Platform, sdk_env: None, image: tuple[Registry, str],
) -> None:
    _, reference = image
    template = AsyncTemplate().from_image(reference).run_cmd("echo deleted > /gone", user="root")
    info = await AsyncTemplate.build(template, "e2e-deleted", memory_mb=512)
    await until(lambda: _in_snapstore(platform, info.build_id), 300, "the template in snapstore")
    local = shared_cache_dir() / "templates" / info.build_id
    saved = shared_cache_dir() / "templates" / "built" / f"{info.build_id}.json"
    assert local.exists() and saved.exists()
    headers = {"X-API-Key": os.environ["E2B_API_KEY"]}
    async with httpx.AsyncClient(base_url=os.environ["E2B_API_URL"], headers=headers) as http:
        assert (await http.delete("/templates/e2e-deleted")).status_code == 204
    assert not await _any_in_snapstore(platform, info.build_id)

    async def dropped() -> bool:
        return not local.exists() and not saved.exists()

    # The node's next sweep (every minute) drops its copy.
    await until(dropped, 180, "the node to drop the deleted template")


async def test_the_js_sdks_template_builder_works_unchanged(
    platform: Platform, e2b_env: dict[str, str], image: tuple[Registry, str],
) -> None:
    node = shutil.which("node")
    assert node, "node is required (make setup-node)"
    _, reference = image
    done = await asyncio.create_subprocess_exec(
        node, str(JS_BUILD), cwd=REPO, env={**e2b_env, "AENV_TEST_IMAGE": reference},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(done.communicate(), 900)
    assert done.returncode == 0, out.decode()[-4000:] + err.decode()[-4000:]
    assert b"template build: ok" in out
