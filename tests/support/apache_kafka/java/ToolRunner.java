/*
 * Runs Apache Kafka command-line tools' main classes one after another in ONE JVM, so that a test pays one JVM
 * start for many tool invocations (measured: 2.1 s for the first, 80-270 ms for each later one, against 1.6-2.3 s
 * for each tool in a JVM of its own). Driven by tests/support/apache_kafka/tool_runner.py.
 *
 * Protocol: each line of stdin names a directory holding "args" (UTF-8, one argument a line: the main class,
 * then its arguments) and optionally "stdin" (what the tool reads from System.in). The tool runs with
 * System.out / System.err going to "stdout" / "stderr" in that directory; then one line "exit <code>" goes to
 * this process's own stdout. End of stdin: System.exit(0) (threads a tool left behind die with the JVM).
 *
 * Exit: Kafka's tools end through org.apache.kafka.common.utils.internals.Exit; its procedures are replaced by
 * one that records the FIRST code (a real JVM would stop there), silences System.out/err for whatever the
 * tool's own catch blocks print while the exception unwinds, and throws. Shutdown hooks a tool registers
 * through Exit (kafka-console-producer closes, so flushes, its producer in one) run when its main has ended,
 * as at a JVM's exit, with the run's stdout/stderr back in place, each on a thread of its own, joined for at
 * most HOOK_TIMEOUT_MS (a hook still running then is named on the run's stderr). A tool calling System.exit
 * directly (only the Verifiable* tools do) ends the runner: the Python side reports that. An exception escaping main is printed to the tool's stderr with
 * exit code 1, as the JVM's default handler does.
 *
 * Threading: commands run one at a time on the main thread.
 */

import java.io.ByteArrayInputStream;
import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.utils.internals.Exit;

public final class ToolRunner {
    /** Thrown by the replaced exit procedure: unwinds the tool's main. */
    static final class ExitCalled extends RuntimeException {
        ExitCalled() {
            super(null, null, false, false);
        }
    }

    private static final long HOOK_TIMEOUT_MS = 30_000;
    private static final List<Thread> HOOKS = new ArrayList<>();
    private static final PrintStream DISCARD = new PrintStream(OutputStream.nullOutputStream());
    private static Integer firstExit;

    private static void exit(int code, String message) {
        if (firstExit == null) {
            firstExit = code;
            System.out.flush();
            System.err.flush();
            System.setOut(DISCARD);
            System.setErr(DISCARD);
        }
        throw new ExitCalled();
    }

    private static void runHooks() throws InterruptedException {
        for (Thread hook : HOOKS) {
            hook.setDaemon(true);
            hook.start();
        }
        for (Thread hook : HOOKS) {
            hook.join(HOOK_TIMEOUT_MS);
            if (hook.isAlive()) {
                System.err.println("ToolRunner: shutdown hook " + hook.getName() + " still running after "
                        + HOOK_TIMEOUT_MS + " ms; left behind");
            }
        }
    }

    public static void main(String[] unused) throws Exception {
        PrintStream protocol = System.out;
        PrintStream runnerErr = System.err;
        Exit.setExitProcedure(ToolRunner::exit);
        Exit.setHaltProcedure(ToolRunner::exit);
        Exit.setShutdownHookAdder((name, hook) -> HOOKS.add(new Thread(hook, name)));
        BufferedReader commands = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = commands.readLine()) != null) {
            Path dir = Paths.get(line);
            List<String> argv = Files.readAllLines(dir.resolve("args"), StandardCharsets.UTF_8);
            Path input = dir.resolve("stdin");
            int code = 0;
            firstExit = null;
            HOOKS.clear();
            try (PrintStream out = new PrintStream(new FileOutputStream(dir.resolve("stdout").toFile()), true, "UTF-8");
                 PrintStream err = new PrintStream(new FileOutputStream(dir.resolve("stderr").toFile()), true, "UTF-8");
                 InputStream in = Files.exists(input)
                         ? new FileInputStream(input.toFile()) : new ByteArrayInputStream(new byte[0])) {
                System.setOut(out);
                System.setErr(err);
                System.setIn(in);
                try {
                    Method main = Class.forName(argv.get(0)).getMethod("main", String[].class);
                    main.invoke(null, (Object) argv.subList(1, argv.size()).toArray(new String[0]));
                } catch (InvocationTargetException e) {
                    if (!(e.getCause() instanceof ExitCalled)) {
                        System.err.print("Exception in thread \"main\" ");
                        e.getCause().printStackTrace();
                        code = 1;
                    }
                } catch (ExitCalled e) {
                    // the exit procedure ran outside main's frames
                }
                System.setOut(out);
                System.setErr(err);
                runHooks();
            } finally {
                System.setOut(protocol);
                System.setErr(runnerErr);
            }
            protocol.println("exit " + (firstExit != null ? firstExit : code));
            protocol.flush();
        }
        System.exit(0);
    }
}
