/* What the phaseconv_tts library exports: its API, and nothing else of it. */
#ifndef PHASECONV_TTS_EXPORT_H
#define PHASECONV_TTS_EXPORT_H
#if defined(PHASECONV_TTS_BUILDING)
#define PHASECONV_TTS_API __attribute__((visibility("default")))
#else
#define PHASECONV_TTS_API
#endif
#endif /* PHASECONV_TTS_EXPORT_H */
