// The broker's own write rate, for bench/rocketmq.py's part (k): the official Java client
// (rocketmq-client, the jar LocalRocketMQ's lib folder holds) in a loop shaped like RocketMQ's own
// benchmark producer (org.apache.rocketmq.example.benchmark.Producer / BatchProducer: a thread pool,
// each thread sending synchronously, one message or one batch of `batch` messages per send), for
// `seconds` after one second of warm-up. Compiled with javac at bench time (never committed as a jar).
//
//   java -cp <lib>/*:<classes> BrokerRate <namesrv> <topic> <threads> <batch> <body bytes> <seconds>
//
// Prints one JSON line: messages acknowledged in the timed window, its seconds, send latency, and the
// messages acknowledged over the whole run.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

public class BrokerRate {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String topic = args[1];
        int threads = Integer.parseInt(args[2]);
        int batch = Integer.parseInt(args[3]);
        int size = Integer.parseInt(args[4]);
        double seconds = Double.parseDouble(args[5]);
        byte[] body = new byte[size];
        Arrays.fill(body, (byte) 'w');
        DefaultMQProducer producer = new DefaultMQProducer("rstream_bench_broker_rate");
        producer.setNamesrvAddr(namesrv);
        producer.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        producer.setSendMsgTimeout(10_000);
        producer.start();
        AtomicBoolean timing = new AtomicBoolean(false);
        AtomicBoolean stop = new AtomicBoolean(false);
        AtomicLong sent = new AtomicLong();
        AtomicLong sends = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        AtomicLong nanos = new AtomicLong();
        AtomicLong total = new AtomicLong();  // acknowledged over the whole run: warm-up and the last sends too
        Thread[] pool = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final int id = t;
            pool[t] = new Thread(() -> {
                long i = 0;
                while (!stop.get()) {
                    List<Message> msgs = new ArrayList<>(batch);
                    for (int b = 0; b < batch; b++) {
                        // a key per message, as rstream's records carry (KEYS), from a 10 000-word vocabulary
                        msgs.add(new Message(topic, null, "w" + ((id * 7919L + i++) % 10_000), body));
                    }
                    long t0 = System.nanoTime();
                    try {
                        SendResult r = batch == 1 ? producer.send(msgs.get(0)) : producer.send(msgs);
                        if (r.getSendStatus() != SendStatus.SEND_OK) {
                            failed.incrementAndGet();
                            continue;
                        }
                        total.addAndGet(batch);
                        if (timing.get()) {
                            sent.addAndGet(batch);
                            sends.incrementAndGet();
                            nanos.addAndGet(System.nanoTime() - t0);
                        }
                    } catch (Exception e) {
                        failed.incrementAndGet();
                    }
                }
            }, "bench-send-" + t);
            pool[t].start();
        }
        Thread.sleep(1000);  // warm-up: routes, connections, the JIT
        timing.set(true);
        long start = System.nanoTime();
        Thread.sleep((long) (seconds * 1000));
        timing.set(false);
        double took = (System.nanoTime() - start) / 1e9;
        stop.set(true);
        for (Thread t : pool) {
            t.join();
        }
        producer.shutdown();
        long n = sent.get();
        long s = sends.get();
        System.out.printf("{\"messages\": %d, \"seconds\": %.3f, \"sends\": %d, \"failed\": %d, \"send_ms_mean\": %.3f, "
            + "\"acknowledged_whole_run\": %d}%n", n, took, s, failed.get(), s == 0 ? 0.0 : nanos.get() / 1e6 / s, total.get());
    }
}
