import org.apache.inlong.tubemq.client.config.ConsumerConfig;
import org.apache.inlong.tubemq.client.config.TubeClientConfig;
import org.apache.inlong.tubemq.client.consumer.ConsumePosition;
import org.apache.inlong.tubemq.client.consumer.ConsumerResult;
import org.apache.inlong.tubemq.client.consumer.PullMessageConsumer;
import org.apache.inlong.tubemq.client.factory.MessageSessionFactory;
import org.apache.inlong.tubemq.client.factory.TubeSingleSessionFactory;
import org.apache.inlong.tubemq.client.producer.MessageProducer;
import org.apache.inlong.tubemq.client.producer.MessageSentResult;
import org.apache.inlong.tubemq.corebase.Message;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.TreeSet;

/**
 * The interop suite's driver of the real TubeMQ Java client. Every output line on stdout is one JSON object
 * with an "event" field; the Python tests read them. Diagnostics go to stderr.
 *
 *  produce MASTER TOPIC TAG COUNT
 *      sends COUNT messages: value "TAG-i", attributes run=TAG and n=i, streamId (msgType) "s" + i%3 and
 *      msgTime 202401311530 on even i; one "sent" event per message, then "done".
 *  consume MASTER TOPIC GROUP TAG MAX_SECONDS FROM [STREAMIDS]
 *      joins GROUP (FROM: first or latest; STREAMIDS: comma-separated filter, "-" for none), waits until the
 *      master assigned it partitions, fetches one round so the group's start offsets are fixed, prints
 *      "ready", then pulls and confirms, printing a "message" event for each message whose value starts with
 *      TAG and a "partitions" event whenever the held partitions change. Ends on a "stop" line or EOF on
 *      stdin, or after MAX_SECONDS; prints "stopped" after leaving the group.
 */
public class InteropClient {

    private static volatile boolean stopRequested = false;

    public static void main(String[] a) throws Throwable {
        if (a.length < 1) {
            System.err.println("usage: see the class comment");
            System.exit(2);
        }
        switch (a[0]) {
            case "produce":
                produce(a[1], a[2], a[3], Integer.parseInt(a[4]));
                break;
            case "consume":
                consume(a[1], a[2], a[3], a[4], Integer.parseInt(a[5]), a[6], a.length > 7 ? a[7] : "-");
                break;
            default:
                System.err.println("unknown mode " + a[0]);
                System.exit(2);
        }
        System.exit(0);
    }

    static String quote(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static void produce(String master, String topic, String tag, int count) throws Throwable {
        MessageSessionFactory f = new TubeSingleSessionFactory(new TubeClientConfig(master));
        MessageProducer p = f.createProducer();
        p.publish(topic);
        int failed = 0;
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, (tag + "-" + i).getBytes(StandardCharsets.UTF_8));
            m.setAttrKeyVal("run", tag);
            m.setAttrKeyVal("n", Integer.toString(i));
            m.putSystemHeader("s" + (i % 3), i % 2 == 0 ? "202401311530" : null);
            MessageSentResult r = p.sendMessage(m);
            if (!r.isSuccess()) {
                failed++;
            }
            emit("{\"event\":\"sent\",\"i\":" + i + ",\"ok\":" + r.isSuccess() + ",\"errCode\":" + r.getErrCode()
                    + ",\"errMsg\":" + quote(r.getErrMsg())
                    + ",\"partitionKey\":" + (r.isSuccess() ? quote(r.getPartition().getPartitionKey()) : "null")
                    + ",\"messageId\":" + (r.isSuccess() ? quote(Long.toString(r.getMessageId())) : "null")
                    + ",\"offset\":" + (r.isSuccess() ? r.getAppendOffset() : -1)
                    + ",\"attribute\":" + quote(m.getAttribute()) + "}");
        }
        emit("{\"event\":\"done\",\"failed\":" + failed + "}");
        p.shutdown();
        f.shutdown();
    }

    static void consume(String master, String topic, String group, String tag, int maxSeconds, String from,
            String streamIds) throws Throwable {
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.trim().equals("stop")) {
                        break;
                    }
                }
            } catch (Exception e) {
                // EOF or a closed pipe: stop as well
            }
            stopRequested = true;
        });
        stdin.setDaemon(true);
        stdin.start();
        long deadline = System.currentTimeMillis() + maxSeconds * 1000L;
        ConsumerConfig cfg = new ConsumerConfig(master, group);
        cfg.setConsumePosition("first".equals(from)
                ? ConsumePosition.CONSUMER_FROM_FIRST_OFFSET : ConsumePosition.CONSUMER_FROM_LATEST_OFFSET);
        MessageSessionFactory f = new TubeSingleSessionFactory(cfg);
        PullMessageConsumer c = f.createPullConsumer(cfg);
        TreeSet<String> filters = null;
        if (!"-".equals(streamIds)) {
            filters = new TreeSet<>();
            for (String s : streamIds.split(",")) {
                filters.add(s);
            }
        }
        c.subscribe(topic, filters);
        c.completeSubscribe();
        boolean ready = false;
        while (!ready && !stopRequested && System.currentTimeMillis() < deadline) {
            ready = c.isPartitionsReady(1000);
        }
        byte[] prefix = tag.getBytes(StandardCharsets.UTF_8);
        String held = "";
        if (ready) {
            // the broker fixes a new group's start offset on its first fetch of each partition
            for (int i = 0; i < 8; i++) {
                ConsumerResult r = c.getMessage();
                if (r.isSuccess()) {
                    report(r, prefix);
                    c.confirmConsume(r.getConfirmContext(), true);
                }
            }
            held = partitions(c);
            emit("{\"event\":\"ready\",\"partitions\":" + held + "}");
        }
        while (ready && !stopRequested && System.currentTimeMillis() < deadline) {
            String now = partitions(c);
            if (!now.equals(held)) {
                held = now;
                emit("{\"event\":\"partitions\",\"partitions\":" + held + "}");
            }
            ConsumerResult r = c.getMessage();
            if (r.isSuccess()) {
                report(r, prefix);
                c.confirmConsume(r.getConfirmContext(), true);
            }
        }
        c.shutdown();
        f.shutdown();
        emit("{\"event\":\"stopped\",\"ready\":" + ready + "}");
    }

    static String partitions(PullMessageConsumer c) throws Exception {
        List<String> keys = new ArrayList<>(new TreeSet<>(c.getCurConsumedPartitions().keySet()));
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < keys.size(); i++) {
            b.append(i == 0 ? "" : ",").append(quote(keys.get(i)));
        }
        return b.append(']').toString();
    }

    static void report(ConsumerResult r, byte[] prefix) {
        if (r.getMessageList() == null) {
            return;
        }
        for (Message m : r.getMessageList()) {
            byte[] data = m.getData();
            boolean tagged = data.length >= prefix.length;
            for (int i = 0; tagged && i < prefix.length; i++) {
                tagged = data[i] == prefix[i];
            }
            if (!tagged) {
                continue;
            }
            emit("{\"event\":\"message\",\"topic\":" + quote(r.getTopicName())
                    + ",\"partitionKey\":" + quote(r.getPartitionKey())
                    + ",\"messageId\":" + quote(Long.toString(m.getIndexId()))
                    + ",\"value\":" + quote(Base64.getEncoder().encodeToString(data))
                    + ",\"attribute\":" + quote(m.getAttribute())
                    + ",\"msgType\":" + quote(m.getMsgType())
                    + ",\"msgTime\":" + quote(m.getMsgTime())
                    + ",\"flag\":" + m.getFlag() + "}");
        }
    }
}
