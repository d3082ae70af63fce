import java.util.Base64;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Java's push consumer (RocketMQ's own {@code DefaultMQPushConsumer}, rocketmq-client) reading a topic from
 * its first offset as a new consumer group, for the tests (tests/support/rocketmq.py, {@code push_consume}).
 *
 * <p>{@code java -cp '<lib>/*' PushConsume.java <namesrv> <topic> <group> <n> <timeout ms> <linger ms>}: prints
 * {@code MSG <broker> <queue id> <queue offset> <keys> <body, base64> <TRAN_MSG>} for each message delivered
 * (every delivery, repeats included: the test judges them), until n distinct messages came and then
 * {@code linger} ms more, in which anything else delivered is printed too; exits 0, or 3 after the timeout.
 */
public class PushConsume {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[2];
        int n = Integer.parseInt(args[3]);
        long timeoutMs = Long.parseLong(args[4]), lingerMs = Long.parseLong(args[5]);
        Map<String, Boolean> seen = new ConcurrentHashMap<>();
        CountDownLatch enough = new CountDownLatch(n);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(group);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt m : messages) {
                String line = String.join("\t", "MSG", m.getBrokerName(), String.valueOf(m.getQueueId()),
                    String.valueOf(m.getQueueOffset()), String.valueOf(m.getKeys()),
                    Base64.getEncoder().encodeToString(m.getBody()), String.valueOf(m.getProperty("TRAN_MSG")));
                synchronized (System.out) {
                    System.out.println(line);
                    System.out.flush();
                }
                String where = m.getBrokerName() + "/" + m.getQueueId() + "/" + m.getQueueOffset();
                if (seen.putIfAbsent(where, Boolean.TRUE) == null) {
                    enough.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        boolean all = enough.await(timeoutMs, TimeUnit.MILLISECONDS);
        if (all) {
            Thread.sleep(lingerMs);
        }
        consumer.shutdown();
        System.out.flush();
        System.exit(all ? 0 : 3);
    }
}
