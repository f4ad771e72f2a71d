package io.llamaserve.engine;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Loads libllamaserve_jni once per class loader, from the first of: the system property
 * {@code llamaserve.jni.path}, the environment variable {@code LLAMASERVE_JNI_PATH} (both the
 * full path of the .so), or {@code java.library.path} (System.loadLibrary("llamaserve_jni")).
 */
public final class NativeLibrary {
  public static final String PATH_PROPERTY = "llamaserve.jni.path";
  public static final String PATH_ENV = "LLAMASERVE_JNI_PATH";

  private static boolean loaded;

  private NativeLibrary() {}

  /** Loads the library if it is not loaded yet; throws UnsatisfiedLinkError naming the source. */
  public static synchronized void load() {
    if (loaded) return;
    String path = System.getProperty(PATH_PROPERTY);
    String source = "-D" + PATH_PROPERTY;
    if (path == null || path.isEmpty()) {
      path = System.getenv(PATH_ENV);
      source = PATH_ENV;
    }
    try {
      if (path != null && !path.isEmpty()) {
        Path file = Path.of(path).toAbsolutePath();
        if (!Files.isRegularFile(file)) {
          throw new UnsatisfiedLinkError(source + " names " + file + ", which is not a file");
        }
        System.load(file.toString());
      } else {
        System.loadLibrary("llamaserve_jni");
      }
    } catch (UnsatisfiedLinkError e) {
      UnsatisfiedLinkError error = new UnsatisfiedLinkError("cannot load libllamaserve_jni ("
          + e.getMessage() + "); set -D" + PATH_PROPERTY + "=/path/to/libllamaserve_jni.so or "
          + PATH_ENV + ", or put it on java.library.path");
      error.initCause(e);
      throw error;
    }
    loaded = true;
  }
}
