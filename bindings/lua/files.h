/* Paths and files of the Lua core (included into transformer.i's helper
 * block).
 *
 * The pure-Lua package never opens a file to learn whether it is there:
 * io.open (fopen) of a FIFO blocks until a writer comes, forever, and of a
 * link to /dev/zero succeeds.  It asks file_kind(path) instead, which
 * stat()s the path (following links) without opening it; every file is
 * then read by the library, through its one door (src/base/file.c: regular
 * files only, capped, docs/USAGE.md "Files that are read"). */
#include <errno.h>
#include <sys/stat.h>

/* The installed default model (the data directory), baked in at build
 * time (transformer.i's INSTALLED_MODEL); the empty string when unknown. */
#ifndef TFM_LUA_INSTALLED_MODEL
#define TFM_LUA_INSTALLED_MODEL ""
#endif

/* file_kind(path) -> "file" (a regular file), "directory", "fifo",
 * "character device", "block device", "socket" or "other", after
 * following links; or nil and the reason (strerror) when nothing is there
 * (or a link dangles, or the path cannot be searched).  A path holding a
 * NUL byte is refused (the C path would end there). */
static int tfml_file_kind(lua_State *L)
{
    size_t n = 0;
    const char *path = luaL_checklstring(L, 1, &n);
    if (strlen(path) != n)
        return luaL_error(L, "file_kind: the path holds a NUL byte");
    struct stat s;
    if (stat(path, &s) != 0) {
        lua_pushnil(L);
        lua_pushstring(L, strerror(errno));
        return 2;
    }
    lua_pushstring(L, S_ISREG(s.st_mode)    ? "file"
                      : S_ISDIR(s.st_mode)  ? "directory"
                      : S_ISFIFO(s.st_mode) ? "fifo"
                      : S_ISCHR(s.st_mode)  ? "character device"
                      : S_ISBLK(s.st_mode)  ? "block device"
                      : S_ISSOCK(s.st_mode) ? "socket"
                                            : "other");
    return 1;
}
