/**
 * One request to the kernel's toolkernel comm, one reply (see toolkernel/_lab.py).
 */
import { Kernel, KernelMessage } from '@jupyterlab/services';

export const COMM_TARGET = 'toolkernel.approval';
const REPLY_TIMEOUT_MS = 60000;

export interface IReply {
  ok: boolean;
  message?: string;
  [key: string]: any;
}

export function request(
  kernel: Kernel.IKernelConnection | null | undefined,
  data: Record<string, any>
): Promise<IReply> {
  if (!kernel) {
    return Promise.resolve({ ok: false, message: 'no kernel is running for this notebook' });
  }
  return new Promise(resolve => {
    const comm = kernel.createComm(COMM_TARGET);
    let settled = false;
    const settle = (reply: IReply) => {
      if (!settled) {
        settled = true;
        clearTimeout(timer);
        resolve(reply);
      }
    };
    // The kernel answers once the running cell is done (comm messages queue behind it).
    const timer = setTimeout(
      () => settle({ ok: false, message: 'the kernel did not answer; is a cell still running?' }),
      REPLY_TIMEOUT_MS
    );
    comm.onMsg = msg => {
      settle(msg.content.data as IReply);
      void comm.close();
    };
    comm.onClose = () =>
      settle({ ok: false, message: 'the kernel closed the connection; is toolkernel loaded (%load_ext toolkernel)?' });
    comm.open({});
    comm.send(data);
  });
}

/** The message type the kernel takes on its control channel (toolkernel/_frontends/_lab.py). */
const CONTROL_REQUEST = 'toolkernel_request';

/**
 * A question while a cell runs, said to the kernel on its control channel: the kernel reads it on a
 * thread of its own, where a comm message would wait behind the running cell. `seen` tells it this
 * page shows the question (so it asks no stdin box); `answer` gives a button's reply.
 */
export async function control(
  kernel: Kernel.IKernelConnection | null | undefined,
  content: { action: 'seen' | 'answer'; question: string; reply?: string }
): Promise<IReply> {
  if (!kernel) {
    return { ok: false, message: 'no kernel is running for this notebook' };
  }
  const msg = KernelMessage.createMessage({
    msgType: CONTROL_REQUEST as any,
    channel: 'control',
    session: kernel.clientId,
    username: kernel.username,
    content
  } as any);
  try {
    const future = kernel.sendControlMessage(msg as any, true, true);
    const reply = (await future.done) as any;
    return (reply?.content ?? { ok: false, message: 'no answer' }) as IReply;
  } catch (reason) {
    return { ok: false, message: `the kernel did not take it: ${reason}` };
  }
}
