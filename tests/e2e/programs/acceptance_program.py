# The first acceptance program, verbatim: an unmodified E2B SDK program.
from e2b import Sandbox, CommandExitException
sbx = Sandbox.create()                                   # the default template, "base"
print(sbx.commands.run("uname -r; cat /etc/os-release").stdout)
sbx.files.write("/tmp/hello.txt", "hi")
assert sbx.files.read("/tmp/hello.txt") == "hi"
r = sbx.commands.run("echo $FOO; pwd", envs={"FOO": "bar"}, cwd="/tmp")
assert r.stdout.split() == ["bar", "/tmp"]
try:
    sbx.commands.run("exit 3"); raise AssertionError("no CommandExitException")
except CommandExitException as e:
    assert e.exit_code == 3
sbx.kill()
