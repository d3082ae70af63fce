import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Base64;
import java.util.Collections;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.java.message.MessageViewImpl;

/**
 * The official gRPC Java client's {@code PushConsumer} (rocketmq-client-java, shaded) reading a topic through
 * the proxy as a new consumer group, for the tests (tests/support/rocketmq.py, {@code grpc_push_consume}).
 *
 * <p>{@code java -cp '<client jar>:<classes>' GrpcPushConsume <proxy> <topic> <group> <n> <timeout ms> <linger ms>}:
 * prints {@code MSG <broker> <queue id> <queue offset> <keys> <body, base64> ?} for each message delivered
 * (every delivery, repeats included: the test judges them; {@code ?}: this client does not say whether a
 * message was transactional), until n distinct messages came and then {@code linger} ms more; exits 0, or 3
 * after the timeout.
 */
public class GrpcPushConsume {
    public static void main(String[] args) throws Exception {
        String proxy = args[0], topic = args[1], group = args[2];
        int n = Integer.parseInt(args[3]);
        long timeoutMs = Long.parseLong(args[4]), lingerMs = Long.parseLong(args[5]);
        Map<String, Boolean> seen = new ConcurrentHashMap<>();
        CountDownLatch enough = new CountDownLatch(n);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration configuration = ClientConfiguration.newBuilder().setEndpoints(proxy).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10)).build();
        provider.newPushConsumerBuilder()
            .setClientConfiguration(configuration)
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(topic, new FilterExpression("*")))
            .setMessageListener(view -> {
                // where it was stored is not in the MessageView interface; the implementation has the broker and
                // offset, and the pop receipt handle the queue id (popped, the message queue's own id is -1):
                // "<ck offset> <pop time> <invisible time> <revive queue> <topic type> <broker> <queue id> ..."
                MessageViewImpl m = (MessageViewImpl) view;
                ByteBuffer body = m.getBody();
                byte[] bytes = new byte[body.remaining()];
                body.get(bytes);
                String keys = m.getKeys().isEmpty() ? "null" : String.join(" ", m.getKeys());
                String broker = m.getMessageQueue().getBroker().getName();
                int queue = Integer.parseInt(m.getReceiptHandle().split(" ")[6]);
                String line = String.join("\t", "MSG", broker, String.valueOf(queue), String.valueOf(m.getOffset()),
                    keys, Base64.getEncoder().encodeToString(bytes), "?");
                synchronized (System.out) {
                    System.out.println(line);
                    System.out.flush();
                }
                if (seen.putIfAbsent(broker + "/" + queue + "/" + m.getOffset(), Boolean.TRUE) == null) {
                    enough.countDown();
                }
                return ConsumeResult.SUCCESS;
            })
            .build();
        boolean all = enough.await(timeoutMs, TimeUnit.MILLISECONDS);
        if (all) {
            Thread.sleep(lingerMs);
        }
        // no consumer.close(): it waits out its receive long polls (19 s measured); the group is thrown away,
        // so acknowledgements still on their way do not matter, and the proxy drops the closed connection
        System.out.flush();
        System.exit(all ? 0 : 3);
    }
}
