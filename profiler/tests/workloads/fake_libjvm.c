// Not a JVM: an executable named libjvm.so (built with -rdynamic) that exports the 24 symbols
// HotSpot exports for external tools, with what a hostile process could put there, then works
// (in native code of its own) for SECONDS.
//
// usage: libjvm.so random|huge-stride|not-filled SECONDS
//   random:      sane strides and member offsets, tables pointing at 4 MiB of random bytes
//   huge-stride: every stride 2^40
//   not-filled:  every scalar 0, as before HotSpot's constructors run
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t gHotSpotVMStructs, gHotSpotVMTypes, gHotSpotVMIntConstants, gHotSpotVMLongConstants;
uint64_t gHotSpotVMStructEntryTypeNameOffset, gHotSpotVMStructEntryFieldNameOffset,
    gHotSpotVMStructEntryTypeStringOffset, gHotSpotVMStructEntryIsStaticOffset,
    gHotSpotVMStructEntryOffsetOffset, gHotSpotVMStructEntryAddressOffset, gHotSpotVMStructEntryArrayStride;
uint64_t gHotSpotVMTypeEntryTypeNameOffset, gHotSpotVMTypeEntrySuperclassNameOffset,
    gHotSpotVMTypeEntryIsOopTypeOffset, gHotSpotVMTypeEntryIsIntegerTypeOffset,
    gHotSpotVMTypeEntryIsUnsignedOffset, gHotSpotVMTypeEntrySizeOffset, gHotSpotVMTypeEntryArrayStride;
uint64_t gHotSpotVMIntConstantEntryNameOffset, gHotSpotVMIntConstantEntryValueOffset,
    gHotSpotVMIntConstantEntryArrayStride;
uint64_t gHotSpotVMLongConstantEntryNameOffset, gHotSpotVMLongConstantEntryValueOffset,
    gHotSpotVMLongConstantEntryArrayStride;

static void sane_layout(void) {
    gHotSpotVMStructEntryFieldNameOffset = 8;
    gHotSpotVMStructEntryTypeStringOffset = 16;
    gHotSpotVMStructEntryIsStaticOffset = 24;
    gHotSpotVMStructEntryOffsetOffset = 32;
    gHotSpotVMStructEntryAddressOffset = 40;
    gHotSpotVMStructEntryArrayStride = 48;
    gHotSpotVMTypeEntrySuperclassNameOffset = 8;
    gHotSpotVMTypeEntryIsOopTypeOffset = 16;
    gHotSpotVMTypeEntryIsIntegerTypeOffset = 20;
    gHotSpotVMTypeEntryIsUnsignedOffset = 24;
    gHotSpotVMTypeEntrySizeOffset = 32;
    gHotSpotVMTypeEntryArrayStride = 40;
    gHotSpotVMIntConstantEntryValueOffset = 8;
    gHotSpotVMIntConstantEntryArrayStride = 16;
    gHotSpotVMLongConstantEntryValueOffset = 8;
    gHotSpotVMLongConstantEntryArrayStride = 16;
}

static volatile uint64_t sink;

__attribute__((noinline)) static void fake_work(int seconds) {
    time_t end = time(NULL) + seconds;
    while (time(NULL) < end)
        for (int i = 0; i < 1000000; i++)
            sink += i;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "random";
    size_t bytes = 4 << 20;
    uint8_t *garbage = malloc(bytes);
    srand(getpid());
    for (size_t i = 0; i < bytes; i++)
        garbage[i] = rand();
    gHotSpotVMStructs = gHotSpotVMTypes = gHotSpotVMIntConstants = gHotSpotVMLongConstants = (uintptr_t)garbage;
    if (strcmp(mode, "huge-stride") == 0) {
        sane_layout();
        gHotSpotVMStructEntryArrayStride = gHotSpotVMTypeEntryArrayStride = gHotSpotVMIntConstantEntryArrayStride =
            gHotSpotVMLongConstantEntryArrayStride = 1ULL << 40;
    } else if (strcmp(mode, "random") == 0) {
        sane_layout();
    }
    fake_work(argc > 2 ? atoi(argv[2]) : 30);
    return 0;
}
