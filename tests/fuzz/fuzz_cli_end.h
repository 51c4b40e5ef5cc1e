/* After the tools' headers: stderr is stderr again (fuzz_cli.h). */
#undef stderr
#define stderr stderr
