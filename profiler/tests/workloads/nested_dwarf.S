/* `spin`, a loop, with debug information in which DEPTH inlined subroutines nest each inside
   the one before, all covering spin's code: a few bytes per level, and a reader that recurses
   once per level needs that many stack frames to name an address in spin. The line table comes
   from the .loc directives. */
#ifndef DEPTH
#define DEPTH 20000
#endif

    .text
    .file 1 "nested_dwarf.S"
    .globl spin
    .type spin, @function
spin:
    .loc 1 14
    mov $1000000, %ecx
1:
    .loc 1 17
    dec %ecx
    jnz 1b
    .loc 1 20
    ret
spin_end:
    .size spin, spin_end - spin

    .section .debug_line, "", @progbits
lines:

    .section .debug_abbrev, "", @progbits
abbreviations:
    /* 1: compile unit, with children: stmt_list (sec_offset), low_pc (addr), high_pc (data4) */
    .uleb128 1, 0x11
    .byte 1
    .uleb128 0x10, 0x17, 0x11, 0x01, 0x12, 0x06, 0, 0
    /* 2: subprogram, with children: name (string), low_pc, high_pc */
    .uleb128 2, 0x2e
    .byte 1
    .uleb128 0x03, 0x08, 0x11, 0x01, 0x12, 0x06, 0, 0
    /* 3: inlined subroutine, with children: abstract_origin (ref4), low_pc, high_pc */
    .uleb128 3, 0x1d
    .byte 1
    .uleb128 0x31, 0x13, 0x11, 0x01, 0x12, 0x06, 0, 0
    .byte 0

    .section .debug_info, "", @progbits
unit:
    .long unit_end - unit_version
unit_version:
    .short 4
    .long abbreviations
    .byte 8
    .uleb128 1
    .long lines
    .quad spin
    .long spin_end - spin
subprogram:
    .uleb128 2
    .asciz "spin"
    .quad spin
    .long spin_end - spin
    .rept DEPTH
    .uleb128 3
    .long subprogram - unit
    .quad spin
    .long spin_end - spin
    .endr
    /* The null entries closing every level: DEPTH inlined, the subprogram, the unit. */
    .fill DEPTH + 2, 1, 0
unit_end:

    .section .note.GNU-stack, "", @progbits
