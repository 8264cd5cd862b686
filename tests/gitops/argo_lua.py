"""Run an Argo CD health script the way Argo CD does, in a real Lua interpreter (lupa).

Argo CD (argo-cd util/lua/lua.go, ``VM.runLua`` and ``ExecuteHealthLua``) runs health scripts
in gopher-lua, a Lua 5.1: for argocd-cm scripts without ``useOpenLibs`` it skips the standard
libraries and opens only package, base, table and a safe os (clock, date, time); it sets the
object as the global table ``obj``, runs the script and JSON-decodes the returned table into
``{status, message}``; a status outside Healthy, Progressing, Degraded, Suspended, Missing,
Unknown becomes ``Unknown`` "Lua returned an invalid health status". Here: Lua 5.1 from lupa,
with the same libraries removed, so a script that needs ``string`` or ``math`` fails here too.
"""

from __future__ import annotations

from typing import Any

from lupa import lua51

VALID = ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown")

_SANDBOX = """
debug.setmetatable("", nil)  -- without the string library a string has no methods
local safe_os = {clock = os.clock, date = os.date, time = os.time}
string, math, io, debug, coroutine = nil, nil, nil, nil, nil
os = safe_os
"""


def run_health(script: str, obj: dict[str, Any]) -> dict[str, str]:
    lua = lua51.LuaRuntime(register_eval=False, register_builtins=False, unpack_returned_tuples=False)
    lua.execute(_SANDBOX)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(script)
    if lua.eval("type")(result) != "table":
        raise TypeError(f"expect table output from Lua script, not {lua.eval('type')(result)}")
    health = {"status": result["status"], "message": result["message"]}
    if health["status"] not in VALID:
        return {"status": "Unknown", "message": "Lua returned an invalid health status"}
    return {k: v for k, v in health.items() if v is not None}
