/**
 * One request to the kernel's toolkernel comm, one reply (see toolkernel/_lab.py).
 */
import { Kernel } from '@jupyterlab/services';

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
