"""The TTS memory benchmark's split of resident memory: library code apart from the program's own."""

import mmap

from benchmarks.workers import library_code_mib


def test_library_code_counts_the_pages_of_mapped_files_other_than_the_program(tmp_path):
    files = {name: tmp_path / name for name in ("program.pte", "library.so")}
    maps = []
    for path, mib in zip(files.values(), (4, 8)):
        path.write_bytes(b"\x01" * (mib << 20))
        with path.open("rb") as file:
            maps.append(mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ))
        assert sum(maps[-1][offset] for offset in range(0, mib << 20, 4096)) == (mib << 20) // 4096  # resident
    # The program's own file is not library code: counting the other file's pages instead moves 8 - 4 MiB.
    moved = library_code_mib(files["program.pte"]) - library_code_mib(files["library.so"])
    assert abs(moved - 4) < 0.5
    for mapped in maps:
        mapped.close()
