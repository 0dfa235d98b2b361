import { BadRequestException, Body, ConflictException, Controller, Get, NotFoundException, Param, ParseIntPipe, Patch, Post } from '@nestjs/common';
import { OrdersService, type CreateOrderDto } from './orders.service';

@Controller('orders')
export class OrdersController {
  constructor(private readonly orders: OrdersService) {}

  @Post()
  async create(@Body() body: Partial<CreateOrderDto>) {
    if (typeof body?.customer !== 'string' || body.customer.length === 0) throw new BadRequestException('customer is required');
    if (!Number.isInteger(body.amountCents) || (body.amountCents as number) <= 0) {
      throw new BadRequestException('amountCents must be a positive integer');
    }
    return this.orders.create({ customer: body.customer, amountCents: body.amountCents as number });
  }

  @Patch(':id')
  async edit(@Param('id', ParseIntPipe) id: number, @Body() body: { amountCents?: number }) {
    if (!Number.isInteger(body?.amountCents) || (body.amountCents as number) <= 0) {
      throw new BadRequestException('amountCents must be a positive integer');
    }
    const order = await this.orders.edit(id, body.amountCents as number);
    if (!order) throw new ConflictException('order is paid already (or does not exist)');
    return order;
  }

  @Get(':id')
  async get(@Param('id', ParseIntPipe) id: number) {
    const order = await this.orders.find(id);
    if (!order) throw new NotFoundException();
    return order;
  }
}
