/* phaseconv's text-to-speech runner for C and for any language that calls C (Kotlin/JNI, Swift, C#,
 * Python ctypes): an opaque handle, calls that return a status, a message for the last failure. No
 * exception crosses this boundary, and no call aborts the process on bad input. One thread at a time
 * per handle, but for phaseconv_tts_stop(). */
#ifndef PHASECONV_TTS_C_H
#define PHASECONV_TTS_C_H

#include <stddef.h>
#include <stdint.h>

#include "tts_export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phaseconv_tts phaseconv_tts;

typedef enum {
  PHASECONV_TTS_OK = 0,
  PHASECONV_TTS_NOT_FOUND = 1,        /* no such program, voice or tokenizer file */
  PHASECONV_TTS_INVALID_ARGUMENT = 2, /* a text, voice, file or option it cannot read */
  PHASECONV_TTS_FAILED = 3,           /* a method of the program failed, or memory ran out */
} phaseconv_tts_status;

typedef struct {
  const char* voice;     /* a built-in voice, a .safetensors state or a WAV file; NULL: the program's default */
  double temperature;    /* < 0: the config's */
  uint64_t seed;
  double eos_threshold;  /* NaN: the config's */
  int frames_after_eos;  /* frames spoken after the end of speech; < 0: the config's */
} phaseconv_tts_config;

/* Each decoded frame: mono float samples in [-1, 1]; return 0 to end the utterance. */
typedef int (*phaseconv_tts_pcm_callback)(const float* samples, size_t count, void* user);

/* The defaults: the program's voice, the config's temperature, threshold and frames after it, seed 0. */
PHASECONV_TTS_API phaseconv_tts_config phaseconv_tts_default_config(void);

/* A handle for the program at `program_path` (NULL when memory runs out); nothing is read until
 * phaseconv_tts_load. `threads`: XNNPACK's for the language model (the pool is sized once per
 * process); `tokenizer_path`: NULL, or a tokenizer file instead of the program's own. */
PHASECONV_TTS_API phaseconv_tts* phaseconv_tts_create(const char* program_path, int threads, const char* tokenizer_path);
PHASECONV_TTS_API phaseconv_tts_status phaseconv_tts_load(phaseconv_tts* tts);
/* The audio's sample rate (0 before a successful load). */
PHASECONV_TTS_API int phaseconv_tts_sample_rate(const phaseconv_tts* tts);
/* Speaks `text` (UTF-8), each frame to `on_pcm` as it is decoded. */
PHASECONV_TTS_API phaseconv_tts_status phaseconv_tts_speak(phaseconv_tts* tts, const char* text, const phaseconv_tts_config* config,
                                         phaseconv_tts_pcm_callback on_pcm, void* user);
/* From any thread: phaseconv_tts_speak returns after the frame in hand. */
PHASECONV_TTS_API void phaseconv_tts_stop(phaseconv_tts* tts);
/* The last failure's message ("" after a call that succeeded); valid until the next call. */
PHASECONV_TTS_API const char* phaseconv_tts_error(const phaseconv_tts* tts);
/* The last utterance's stats as JSON (phaseconv-tts --json's summary); valid until the next call. */
PHASECONV_TTS_API const char* phaseconv_tts_stats_json(const phaseconv_tts* tts);
PHASECONV_TTS_API void phaseconv_tts_destroy(phaseconv_tts* tts);

#ifdef __cplusplus
}
#endif

#endif /* PHASECONV_TTS_C_H */
