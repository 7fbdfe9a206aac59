/*
 * Stands in for libcapstone in every QEMU of a node, preloaded under the soname QEMU needs
 * (artifacts/preload.py), so that the dynamic loader takes it for the real library. QEMU links
 * the disassembler only to print guest code in debug logs and the monitor, which no node asks
 * for; the real library costs each QEMU 1.4 MiB of private pages (its tables' relocations) and
 * maps 6 MiB of code into a process a hostile guest talks to. A QEMU asked to disassemble is
 * told the architecture is not supported, and prints the bytes instead.
 *
 * Each function QEMU may import is defined (it binds every symbol at start): the build checks
 * that QEMU imports no other.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CS_ERR_OK 0
#define CS_ERR_ARCH 2

typedef size_t csh;

int cs_open(int arch, int mode, csh *handle)
{
    (void)arch;
    (void)mode;
    if (handle != NULL)
        *handle = 0;
    return CS_ERR_ARCH;
}

int cs_close(csh *handle)
{
    (void)handle;
    return CS_ERR_OK;
}

int cs_option(csh handle, int type, size_t value)
{
    (void)handle;
    (void)type;
    (void)value;
    return CS_ERR_ARCH;
}

int cs_errno(csh handle)
{
    (void)handle;
    return CS_ERR_ARCH;
}

const char *cs_strerror(int code)
{
    (void)code;
    return "no disassembler in this process";
}

unsigned int cs_version(int *major, int *minor)
{
    if (major != NULL)
        *major = 0;
    if (minor != NULL)
        *minor = 0;
    return 0;
}

bool cs_support(int query)
{
    (void)query;
    return false;
}

void *cs_malloc(csh handle)
{
    (void)handle;
    return NULL;
}

void cs_free(void *insn, size_t count)
{
    (void)insn;
    (void)count;
}

size_t cs_disasm(csh handle, const uint8_t *code, size_t size, uint64_t address, size_t count,
                 void **insn)
{
    (void)handle;
    (void)code;
    (void)size;
    (void)address;
    (void)count;
    if (insn != NULL)
        *insn = NULL;
    return 0;
}

bool cs_disasm_iter(csh handle, const uint8_t **code, size_t *size, uint64_t *address,
                    void *insn)
{
    (void)handle;
    (void)code;
    (void)size;
    (void)address;
    (void)insn;
    return false;
}
