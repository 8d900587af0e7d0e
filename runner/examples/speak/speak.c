/* speak PROGRAM TEXT OUT.wav [VOICE]: a text-to-speech program spoken through phaseconv_tts's C API,
 * its frames written as they come into a 16-bit mono WAV file. */
#include <math.h>
#include <phaseconv/tts_c.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  FILE* file;
  uint32_t samples;
} Output;

static void put32(FILE* file, uint32_t value) { fwrite(&value, 4, 1, file); }
static void put16(FILE* file, uint16_t value) { fwrite(&value, 2, 1, file); }

static void wav_header(FILE* file, int rate, uint32_t samples) {
  fwrite("RIFF", 1, 4, file), put32(file, 36 + samples * 2), fwrite("WAVEfmt ", 1, 8, file);
  put32(file, 16), put16(file, 1), put16(file, 1), put32(file, rate), put32(file, rate * 2);
  put16(file, 2), put16(file, 16), fwrite("data", 1, 4, file), put32(file, samples * 2);
}

static int on_pcm(const float* samples, size_t count, void* user) {
  Output* out = user;
  for (size_t i = 0; i < count; ++i) {
    float v = samples[i] < -1.0f ? -1.0f : samples[i] > 1.0f ? 1.0f : samples[i];
    put16(out->file, (uint16_t)(int16_t)nearbyintf(v * 32767.0f));
  }
  out->samples += (uint32_t)count;
  return 1; /* 0 would end the utterance */
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: speak PROGRAM TEXT OUT.wav [VOICE]\n");
    return 2;
  }
  phaseconv_tts* tts = phaseconv_tts_create(argv[1], 1, NULL);
  if (tts == NULL || phaseconv_tts_load(tts) != PHASECONV_TTS_OK) {
    fprintf(stderr, "speak: %s\n", tts ? phaseconv_tts_error(tts) : "out of memory");
    phaseconv_tts_destroy(tts);
    return 2;
  }
  Output out = {fopen(argv[3], "wb"), 0};
  if (out.file == NULL) {
    fprintf(stderr, "speak: cannot write %s\n", argv[3]);
    phaseconv_tts_destroy(tts);
    return 2;
  }
  wav_header(out.file, phaseconv_tts_sample_rate(tts), 0);
  phaseconv_tts_config config = phaseconv_tts_default_config();
  config.voice = argc > 4 ? argv[4] : NULL;
  config.temperature = 0.0;
  phaseconv_tts_status status = phaseconv_tts_speak(tts, argv[2], &config, on_pcm, &out);
  fseek(out.file, 0, SEEK_SET);
  wav_header(out.file, phaseconv_tts_sample_rate(tts), out.samples);
  fclose(out.file);
  if (status != PHASECONV_TTS_OK) {
    fprintf(stderr, "speak: %s\n", phaseconv_tts_error(tts));
    remove(argv[3]); /* no half-written file left behind */
  } else {
    fprintf(stderr, "%s\n", phaseconv_tts_stats_json(tts));
  }
  phaseconv_tts_destroy(tts);
  return status == PHASECONV_TTS_OK ? 0 : 2;
}
